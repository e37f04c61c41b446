"""HC101: a termination method without the pool-transfer guard."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from lint.findings import Finding
from lint.rules.base import POOLED_TAIL, Invalid, MethodRule, fenced, with_pools
from lint.rules.examples import GUARDED, SMALL

if TYPE_CHECKING:
    from lint.analysis import MethodAnalysis

UNGUARDED = '''
class UnifiedRadixCache:
    def _extras_pending(self, op):
        return bool(op.pool_transfers) and not op.pool_transfers_done

    def can_terminate_prefetch(self, op):
        can_terminate = True
        if self.prefetch_stop_policy == "best_effort":
            return can_terminate
        # an empty hit list never counts as complete
        kv_complete = bool(op.hash_value) and op.completed_tokens == len(op.hash_value) * self.page_size
        if self.prefetch_stop_policy == "wait_complete":
            can_terminate = kv_complete
        elif self.prefetch_stop_policy == "timeout":
            can_terminate = kv_complete or self.clock() - op.start_time > self.timeout_for(op)
        terminated = op.is_terminated()
        vote_no, any_terminated = self.reducer.all_reduce_max(
            [1 - int(can_terminate), int(terminated)], name="prefetch_terminate"
        )
        return vote_no == 0 or any_terminated == 1
'''

# Not fenced (the default): upstream's guard, forcing the vote, before the reduce.
UNGUARDED_FIXED = UNGUARDED.replace(
    '''        terminated = op.is_terminated()
''', '''        # Vote no while KV is complete but extra-pool transfers still run.
        if kv_complete and op.pool_transfers and not op.pool_transfers_done:
            can_terminate = False
        terminated = op.is_terminated()
''')

# Fenced: the spec's guard on the completion predicate.
UNGUARDED_FENCED_FIXED = UNGUARDED.replace(
    '''        if self.prefetch_stop_policy == "wait_complete":
''', '''        # KV alone is not complete while extra-pool transfers still run.
        if kv_complete and op.pool_transfers and not op.pool_transfers_done:
            kv_complete = False
        if self.prefetch_stop_policy == "wait_complete":
''')

GETATTR_FILE_UNGUARDED = '''
class HiMambaRadixCache:
    def _pending(self, prefetch_op):
        return getattr(prefetch_op, "pool_transfers", None) and not getattr(prefetch_op, "pool_transfers_done", True)

    def can_terminate_prefetch(self, prefetch_op):
        if self.prefetch_stop_policy == "best_effort":
            return True
        is_done = self._prefetch_completed(prefetch_op)
        can_terminate = is_done
        if self.prefetch_stop_policy == "timeout":
            can_terminate = is_done or self._timed_out(prefetch_op)
        return can_terminate
'''

GETATTR_FILE_FIXED = GETATTR_FILE_UNGUARDED.replace(
    '''        can_terminate = is_done
''', '''        # KV alone is not complete while extra-pool transfers still run.
        if is_done and getattr(prefetch_op, "pool_transfers", None) and not getattr(prefetch_op, "pool_transfers_done", True):
            is_done = False
        can_terminate = is_done
''')

# Nothing in the file says which pool fields the snapshot has: no fix is offered.
NO_EVIDENCE = with_pools('''
class Cache:
    def can_terminate_prefetch(self, operation):
        progress = operation.progress()
        completed = progress.completed_tokens == len(progress.hash_value) * self.page_size
        if self.prefetch_stop_policy == "wait_complete":
            return completed
        return completed or self.timed_out(operation)
''')


class GuardMissing(MethodRule):
    """The vote must be "no" while KV completed but extra-pool transfers are not
    done. A termination method that never consults `pool_transfers_done` in a
    way that forces something to "no" lets a rank insert host slots an
    extra-pool get is still writing (the bug upstream PR #27550 fixed in
    HiRadixCache). The fix inserts the spec's guard in a fenced implementation
    and upstream's vote-forcing guard otherwise, spelled with the pool fields
    the code already reads on that object; without such evidence it declines."""

    code = "HC101"
    clauses = ("D3",)
    name = "guard-missing"
    summary = "termination method has no pool_transfers_done guard forcing the vote to no"
    fixable = True

    VALID = (
        GUARDED,
        # abstract declarations and delegations hold no logic to guard
        '''
import abc


class BaseCache(abc.ABC):
    @abc.abstractmethod
    def can_terminate_prefetch(self, operation):
        """Return whether the prefetch may stop now."""


class Wrapper(BaseCache):
    def can_terminate_prefetch(self, operation):
        return super().can_terminate_prefetch(operation)
''',
        # plain attributes, the flag read through a local, guard as `&=`
        '''
class Cache:
    def can_terminate_prefetch(self, op):
        completed = len(op.hash_value) > 0 and op.completed_tokens >= len(op.hash_value) * self.page_size
        extras_done = op.pool_transfers_done
        completed &= extras_done
        if self.prefetch_stop_policy == "wait_complete":
            return completed
        return completed or self.timed_out(op)
''',
    )
    INVALID = (
        Invalid(UNGUARDED, line=6, fixed=UNGUARDED_FIXED, message="no pool_transfers_done guard"),
        Invalid(UNGUARDED, line=6, fixed=UNGUARDED_FENCED_FIXED, config=fenced("UnifiedRadixCache")),
        Invalid(GETATTR_FILE_UNGUARDED, line=6, fixed=GETATTR_FILE_FIXED, config=fenced("HiMambaRadixCache")),
        Invalid(NO_EVIDENCE, line=3, fixed=NO_EVIDENCE, config=fenced("Cache")),
        # inverted: this forces "no" once the transfers are done, not while they run
        Invalid(SMALL + '''\
        if completed and op.pool_transfers_done:
            completed = False
        return completed
''' + POOLED_TAIL, line=3),
        # the check is there, but it only logs
        Invalid(SMALL + '''\
        if completed and not op.pool_transfers_done:
            self.log.warning("extra pools still loading for %s", op.request_id)
        return completed
''' + POOLED_TAIL, line=3, message="line 5 forces nothing to no"),
        # a name like the flag's is not the flag: the finding says what it reads instead
        Invalid(SMALL + '''\
        if completed and op.pool_transfers and not op.pool_transfers_finished:
            completed = False
        return completed
''' + POOLED_TAIL, line=3, message="it reads 'pool_transfers_finished' (line 5), not 'pool_transfers_done'"),
    )

    def check(self, method: "MethodAnalysis") -> Iterable[Finding]:
        if not method.guard_in_decision:
            return  # configured: the check lives in the commit path (HC108)
        if method.guards:
            return
        note = ""
        if not method.predicates:
            note = " (no completion predicate local found to key it on)"
        if method.inert_checks:
            what = (f"{method.qualname}: its {method.flag} check at line {method.inert_checks[0]} "
                    f"forces nothing to no, so the vote can be 'yes'")
        else:
            what = f"{method.qualname} has no {method.flag} guard: the vote can be 'yes'"
            if method.lookalikes:  # why a check there is not seen as the guard
                reads = " and ".join(f"'{name}' (line {line})" for name, line in method.lookalikes)
                note += f"; it reads {reads}, not '{method.flag}'"
        yield self.finding(method, method.def_line, method.def_col,
                           f"{what} while extra-pool transfers are still running{note}")
