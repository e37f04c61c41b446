"""HC103: the guard exists but cannot take effect where it sits."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from lint.findings import Finding
from lint.rules.base import POOLED_TAIL, Invalid, MethodRule
from lint.rules.examples import GUARDED, SMALL, TORCH, guard_line, hiradix

if TYPE_CHECKING:
    from lint.analysis import MethodAnalysis

AFTER_REDUCE = TORCH + "class HiRadixCache:\n" + hiradix(after_reduce=guard_line("completed"))

AFTER_REDUCE_FIXED = TORCH + "class HiRadixCache:\n" + hiradix(before_policies=guard_line("completed"))


# Upstream's form, but after the reduce: peers decide without it.
VOTE_FORCING_AFTER_REDUCE = TORCH + "class HiRadixCache:\n" + hiradix(after_reduce=guard_line("can_terminate"))

# Not fenced: moved before the reduce, still forcing the vote.
VOTE_FORCING_AFTER_REDUCE_FIXED = TORCH + "class HiRadixCache:\n" + hiradix(
    before_reduce=guard_line("can_terminate"))


class GuardPlacement(MethodRule):
    """A guard only helps if every rank's vote includes it: it must sit after
    the completion predicate is bound, before that predicate feeds the vote,
    before the cross-rank reduce, on both the wait_complete and timeout paths,
    and no earlier return may hand out a 'yes' around it. An early-return guard
    ahead of a reduce makes this rank skip a collective its peers still run."""

    code = "HC103"
    clauses = ("X3", "D3")
    name = "guard-placement"
    summary = "guard is placed where it cannot take effect (after the reduce, bypassed, or skipping the collective)"
    fixable = True

    VALID = (
        GUARDED,
        # reduce through a reducer object, only with several ranks
        '''
class HiMambaRadixCache:
    def can_terminate_prefetch(self, operation):
        if self.prefetch_stop_policy == "best_effort":
            return True
        completed = bool(operation.hash_value) and (
            operation.completed_tokens == len(operation.hash_value) * self.page_size
        )
        if completed and operation.pool_transfers and not operation.pool_transfers_done:
            completed = False
        can_terminate = completed
        if self.prefetch_stop_policy == "timeout":
            can_terminate = completed or self._timed_out(operation)
        terminated = operation.is_terminated()
        if self.world_size > 1:
            vote_no, terminated = self.reducer.all_reduce_max(
                [1 - int(can_terminate), int(terminated)], name="prefetch_terminate"
            )
            can_terminate = vote_no == 0
        return can_terminate or terminated
''',
    )
    INVALID = (
        Invalid(AFTER_REDUCE, line=24, fixed=AFTER_REDUCE_FIXED, message="after the cross-rank reduce"),
        Invalid(VOTE_FORCING_AFTER_REDUCE, line=24, fixed=VOTE_FORCING_AFTER_REDUCE_FIXED,
                message="after the cross-rank reduce"),
        # upstream's form before the policy branches: they set the vote again
        Invalid(SMALL + '''\
        can_terminate = False
        if completed and not op.pool_transfers_done:
            can_terminate = False
        if self.prefetch_stop_policy == "wait_complete":
            can_terminate = completed
        elif self.prefetch_stop_policy == "timeout":
            can_terminate = completed or self.timed_out(op)
        return can_terminate
''' + POOLED_TAIL, line=6, message="'can_terminate' is bound again at line 9"),
        # an earlier return on the wait_complete path hands out "yes" around the guard
        Invalid(SMALL + '''\
        if self.prefetch_stop_policy == "wait_complete":
            return completed
        if completed and not op.pool_transfers_done:
            completed = False
        return completed or self.timed_out(op)
''' + POOLED_TAIL, line=7, message="bypasses it"),
        # early-return guard ahead of the collective
        Invalid(SMALL + '''\
        if completed and not op.pool_transfers_done:
            return False
        can_terminate = completed
        flags = self.reducer.all_reduce_max([1 - int(can_terminate), int(op.is_terminated())], name="t")
        return flags[0] == 0 or flags[1] == 1
''' + POOLED_TAIL, line=5, message="skip the collective"),
        # the predicate was already folded into the vote
        Invalid(SMALL + '''\
        can_terminate = completed
        if completed and not op.pool_transfers_done:
            completed = False
        return can_terminate
''' + POOLED_TAIL, line=6, message="already used"),
        # only the wait_complete path is guarded
        Invalid(SMALL + '''\
        if self.prefetch_stop_policy == "wait_complete":
            if completed and not op.pool_transfers_done:
                completed = False
            can_terminate = completed
        else:
            can_terminate = completed or self.timed_out(op)
        return can_terminate
''' + POOLED_TAIL, line=6, message="timeout path votes without it"),
    )

    def check(self, method: "MethodAnalysis") -> Iterable[Finding]:
        if not method.guard_in_decision:
            return  # configured: the check lives in the commit path (HC108)
        for guard in method.guards:
            if guard.problems:
                yield self.finding(
                    method, guard.line, guard.col,
                    f"ineffective {method.flag} guard in {method.qualname}: {guard.problems[0].message}",
                )
