"""HC102: the guard is keyed on something other than the completion predicate."""

from __future__ import annotations

from typing import Iterable

from lint.findings import Finding
from lint.analysis import MethodAnalysis
from lint.rules.base import Invalid, MethodRule
from lint.rules.guard_missing import GUARDED

KEYED_ON_VOTE = '''
import torch
import torch.distributed as dist


class HiRadixCache:
    def can_terminate_prefetch(self, operation):
        can_terminate = True
        if self.prefetch_stop_policy == "best_effort":
            return can_terminate
        completed = len(operation.hash_value) > 0 and (
            operation.completed_tokens == len(operation.hash_value) * self.page_size
        )
        if self.prefetch_stop_policy == "wait_complete":
            can_terminate = completed
        elif self.prefetch_stop_policy == "timeout":
            can_terminate = completed or self._timed_out(operation)
        # keep the vote at "no" while side pools are still loading
        if can_terminate and operation.pool_transfers and not operation.pool_transfers_done:
            can_terminate = False
        terminated = operation.is_terminated()
        states = torch.tensor([1 - int(can_terminate), int(terminated)], dtype=torch.int)
        dist.all_reduce(states, op=dist.ReduceOp.MAX, group=self.tp_group)
        return states[0].item() == 0 or states[1].item() == 1
'''

KEYED_ON_VOTE_FIXED = '''
import torch
import torch.distributed as dist


class HiRadixCache:
    def can_terminate_prefetch(self, operation):
        can_terminate = True
        if self.prefetch_stop_policy == "best_effort":
            return can_terminate
        completed = len(operation.hash_value) > 0 and (
            operation.completed_tokens == len(operation.hash_value) * self.page_size
        )
        # keep the vote at "no" while side pools are still loading
        if completed and operation.pool_transfers and not operation.pool_transfers_done:
            completed = False
        if self.prefetch_stop_policy == "wait_complete":
            can_terminate = completed
        elif self.prefetch_stop_policy == "timeout":
            can_terminate = completed or self._timed_out(operation)
        terminated = operation.is_terminated()
        states = torch.tensor([1 - int(can_terminate), int(terminated)], dtype=torch.int)
        dist.all_reduce(states, op=dist.ReduceOp.MAX, group=self.tp_group)
        return states[0].item() == 0 or states[1].item() == 1
'''


class GuardKey(MethodRule):
    """The guard must force the *completion predicate* to "no" (the reviewed
    upstream shape every implementation shares), not the vote or some other
    local: keyed on the vote it is easily placed after the vote is folded, and
    the implementations stop being comparable."""

    code = "HC102"
    name = "guard-key"
    summary = "guard is keyed on the vote or another local instead of the completion predicate"
    fixable = True

    VALID = (
        GUARDED,
        # single rank, early-return guard keyed on the predicate through a helper
        '''
class LocalCache:
    def can_terminate_prefetch(self, prefetch_op):
        done = self._prefetch_completed(prefetch_op)
        if done and not getattr(prefetch_op, "pool_transfers_done", True):
            return False
        if self.prefetch_stop_policy == "timeout":
            return done or self._timed_out(prefetch_op)
        return done
''',
    )
    INVALID = (
        Invalid(KEYED_ON_VOTE, line=19, fixed=KEYED_ON_VOTE_FIXED, message="keyed on the vote"),
        # the vote folded with the flag after the policy branches
        Invalid('''
class Cache:
    def can_terminate_prefetch(self, op):
        completed = op.completed_tokens == len(op.hash_value) * self.page_size
        can_terminate = False
        if self.prefetch_stop_policy == "wait_complete":
            can_terminate = completed
        can_terminate = can_terminate and op.pool_transfers_done
        return can_terminate
''', line=8),
        # keyed on the transfer state alone
        Invalid('''
class Cache:
    def can_terminate_prefetch(self, op):
        completed = op.completed_tokens == len(op.hash_value) * self.page_size
        if op.pool_transfers and not op.pool_transfers_done:
            return False
        return completed
''', line=5, message="transfer state"),
    )

    def check(self, method: MethodAnalysis) -> Iterable[Finding]:
        from lint.fix import can_relocate_guard

        guard = method.guard
        if guard is None or guard.key_kind == "predicate":
            return
        target = (
            f"'{sorted(method.predicates)[0]}'" if method.predicates else "a completion predicate local"
        )
        if guard.key_kind == "vote":
            what = f"keyed on the vote '{method.vote}'"
        elif guard.key_kind == "none":
            what = "keyed on the transfer state alone"
        else:
            what = f"keyed on '{guard.key}'"
        yield self.finding(
            method, guard.line, guard.col,
            f"the pool_transfers_done guard in {method.qualname} is {what}; "
            f"key it on the completion predicate {target}",
            fixable=can_relocate_guard(method),
        )
