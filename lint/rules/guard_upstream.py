"""HC107: the guard forces the vote (upstream's form): safe, but the timeout cannot end the wait."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from lint.protocol import VOTE_FORCING
from lint.findings import Finding
from lint.rules.base import WARNING, Invalid, MethodRule, Valid, fenced
from lint.rules.examples import GUARDED, HEAD

if TYPE_CHECKING:
    from lint.analysis import MethodAnalysis

# Hand-written in the shape of SGLang's HiRadixCache after PR #27550: the guard
# after the policy branches, conditioned on completion, forcing the vote; the
# reduce through a `self` helper that loops over process groups.
FORCES_VOTE = '''
import time

import torch


class HiRadixCache:
    def _all_reduce_attn_groups(self, tensor, op):
        for group in (self.attn_cp_group, self.attn_tp_group):
            if group is not None:
                torch.distributed.all_reduce(tensor, op=op, group=group)

    def _linear_timeout(self, operation):
        cfg = self.prefetch_timeout_config
        budget = min(cfg.max, cfg.base + cfg.per_ki_token * len(operation.hash_value) / 1024)
        return time.monotonic() - operation.start_time > budget

''' + HEAD + '''        if not operation.hash_value:
            completed = False
        else:
            completed = operation.completed_tokens == len(operation.hash_value) * self.page_size
        if self.prefetch_stop_policy == "wait_complete":
            can_terminate = completed
        elif self.prefetch_stop_policy == "timeout":
            can_terminate = completed or self._linear_timeout(operation)
        else:
            return True
        if (
            completed
            and getattr(operation, "pool_transfers", None)
            and not getattr(operation, "pool_transfers_done", True)
        ):
            can_terminate = False
        terminated = operation.is_terminated()
        states = torch.tensor([1 - int(can_terminate), int(terminated)], dtype=torch.int)
        self._all_reduce_attn_groups(states, torch.distributed.ReduceOp.MAX)
        return states[0].item() == 0 or states[1].item() == 1
'''

# Fenced: the same guard now forces the completion predicate, where it is bound.
FORCES_VOTE_FENCED_FIXED = FORCES_VOTE.replace('''        if (
            completed
            and getattr(operation, "pool_transfers", None)
            and not getattr(operation, "pool_transfers_done", True)
        ):
            can_terminate = False
''', "").replace('''        if self.prefetch_stop_policy == "wait_complete":
''', '''        if (
            completed
            and getattr(operation, "pool_transfers", None)
            and not getattr(operation, "pool_transfers_done", True)
        ):
            completed = False
        if self.prefetch_stop_policy == "wait_complete":
''')

ONE_EXPRESSION = '''
class Cache:
    def can_terminate_prefetch(self, op):
        completed = bool(op.hash_value) and op.completed_tokens == len(op.hash_value) * self.page_size
        can_terminate = False
        if self.prefetch_stop_policy == "wait_complete":
            can_terminate = completed
        elif self.prefetch_stop_policy == "timeout":
            can_terminate = completed or self.timed_out(op)
        can_terminate = can_terminate and not (
            completed and getattr(op, "pool_transfers", None) and not getattr(op, "pool_transfers_done", True)
        )
        return can_terminate
'''

SINGLE_RANK_RETURN = '''
class LocalCache:
    def can_terminate_prefetch(self, prefetch_op):
        done = self._prefetch_completed(prefetch_op)
        if done and not getattr(prefetch_op, "pool_transfers_done", True):
            return False
        if self.prefetch_stop_policy == "timeout":
            return done or self._timed_out(prefetch_op)
        return done
'''


class VoteForcingGuard(MethodRule):
    """Upstream's guard (SGLang PR #27550 and the unified and mamba caches)
    forces the vote to "no" while KV is complete and pool transfers are
    pending. That is safe without any other protection, but under 'timeout' it
    also vetoes "timed out": while a pool read hangs the wait never ends
    (sglang issue #35012; PR #35181 proposes the spec's form). The spec's form
    forces the completion predicate instead, so timing out still ends the
    wait; that is safe only when the commit is clamped to every pool (F3) and
    slots with IO in flight are freed only when it ends (F5). Reported as a
    warning (exit 0 unless fail-on-warnings); fixed to the spec's form only
    for implementations configured with `fenced = true`."""

    code = "HC107"
    clauses = ("D5", "D3")
    name = "vote-forcing-guard"
    summary = "guard forces the vote (upstream's form): under timeout the wait cannot end while pool IO is pending"
    level = WARNING
    fixable = True

    VALID = (
        GUARDED,
        # the same one expression, folded into the completion predicate: the spec's form
        ONE_EXPRESSION.replace("can_terminate = can_terminate and not (", "completed = completed and not (")
        .replace("            completed and getattr(op, \"pool_transfers\", None)", "            getattr(op, \"pool_transfers\", None)"),
        # folded into the predicate's own binding
        Valid('''
class Cache:
    def can_terminate_prefetch(self, op):
        completed = bool(op.hash_value) and op.completed_tokens == len(op.hash_value) * self.page_size and not (
            getattr(op, "pool_transfers", None) and not getattr(op, "pool_transfers_done", True)
        )
        if self.prefetch_stop_policy == "wait_complete":
            return completed
        return completed or self.timed_out(op)
'''),
    )
    INVALID = (
        Invalid(FORCES_VOTE, line=32, fixed=FORCES_VOTE, message="issue #35012"),
        Invalid(FORCES_VOTE, line=32, fixed=FORCES_VOTE_FENCED_FIXED, config=fenced("HiRadixCache")),
        Invalid(ONE_EXPRESSION, line=10, message="forces the vote 'can_terminate'"),
        # single rank: `return False` forces the result the same way
        Invalid(SINGLE_RANK_RETURN, line=5, message="forces the result"),
    )

    def check(self, method: "MethodAnalysis") -> Iterable[Finding]:
        if not method.guard_in_decision:
            return  # configured: the check lives in the commit path (HC108)
        pred = f"'{sorted(method.predicates)[0]}'" if method.predicates else "the completion predicate"
        for guard in method.guards:
            if guard.shape != VOTE_FORCING or guard.problems:
                continue
            forced = "the result" if guard.target is None else f"the vote '{guard.target}'"
            yield self.finding(
                method, guard.line, guard.col,
                f"{method.qualname} forces {forced} to no while KV is complete and pool transfers are "
                f"pending (upstream's form): under 'timeout' the wait cannot end while pool IO is pending "
                f"(sglang issue #35012). Forcing {pred} instead needs the commit clamped to every pool "
                f"first; then set fenced = true for this implementation",
            )
