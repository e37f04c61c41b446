"""HC102: the guard is keyed on something other than the completion predicate."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from lint.findings import Finding
from lint.protocol import OTHER_LOCAL, TRANSFERS_ONLY, VOTE_KEYED
from lint.rules.base import Invalid, MethodRule, fenced, with_pools
from lint.rules.examples import GUARDED, HEAD, POLICIES, SMALL, guard_line
from lint.rules.guard_upstream import FORCES_VOTE, SINGLE_RANK_RETURN

if TYPE_CHECKING:
    from lint.analysis import MethodAnalysis


def _keyed(before_policies: str = "", after_policies: str = "") -> str:
    """The fork's method reduced through `dist` on every rank, with lines put in around the policy branches."""
    return "\nimport torch\nimport torch.distributed as dist\n\n\nclass HiRadixCache:\n" + HEAD + '''\
        completed = len(operation.hash_value) > 0 and (
            operation.completed_tokens == len(operation.hash_value) * self.page_size
        )
''' + before_policies + POLICIES + after_policies + '''\
        terminated = operation.is_terminated()
        states = torch.tensor([1 - int(can_terminate), int(terminated)], dtype=torch.int)
        dist.all_reduce(states, op=dist.ReduceOp.MAX, group=self.tp_group)
        return states[0].item() == 0 or states[1].item() == 1
'''


LOADING = '        # keep the vote at "no" while side pools are still loading\n'
KEYED_ON_VOTE = _keyed(after_policies=LOADING + guard_line("can_terminate", key="can_terminate"))
KEYED_ON_VOTE_FENCED_FIXED = _keyed(before_policies=LOADING + guard_line("completed"))
# Not fenced: re-keyed onto completion, still forcing the vote (upstream's form).
KEYED_ON_VOTE_FIXED = _keyed(after_policies=LOADING + guard_line("can_terminate"))

FOLDED_ON_TRANSFERS = with_pools(SMALL + '''\
        can_terminate = False
        if self.prefetch_stop_policy == "wait_complete":
            can_terminate = completed
        can_terminate = can_terminate and op.pool_transfers_done
        return can_terminate
''')

FOLDED_ON_TRANSFERS_FIXED = FOLDED_ON_TRANSFERS.replace(
    "        can_terminate = can_terminate and op.pool_transfers_done\n",
    "        # Vote no while KV is complete but extra-pool transfers still run.\n"
    "        if completed and not op.pool_transfers_done:\n"
    "            can_terminate = False\n")



class GuardKey(MethodRule):
    """The guard's condition must be KV completion: it may force the vote to
    "no" only when KV is complete and transfers are pending (upstream's form,
    HC107) or force the completion predicate itself (the spec's form). Keyed
    on the vote, on the transfer state alone or on some other local, it
    blocks a prefetch whose KV is not complete, which under 'timeout' has
    timed out and must be let go, and the implementations stop being
    comparable."""

    code = "HC102"
    clauses = ("D3", "D5")
    name = "guard-key"
    summary = "guard is conditioned on the vote, the transfer state alone or another local, not on KV completion"
    fixable = True

    VALID = (
        GUARDED,
        FORCES_VOTE,  # upstream's form is HC107's business
        # single rank, early-return guard conditioned on the predicate through a helper
        SINGLE_RANK_RETURN,
    )
    INVALID = (
        Invalid(KEYED_ON_VOTE, line=19, fixed=KEYED_ON_VOTE_FIXED, message="conditioned on the vote"),
        Invalid(KEYED_ON_VOTE, line=19, fixed=KEYED_ON_VOTE_FENCED_FIXED, config=fenced("HiRadixCache")),
        # the vote folded with the flag after the policy branches
        Invalid(FOLDED_ON_TRANSFERS, line=8, fixed=FOLDED_ON_TRANSFERS_FIXED, message="transfer state alone"),
        # keyed on the transfer state alone, and nowhere to put upstream's guard
        Invalid(FOLDED_ON_TRANSFERS.replace(
            "        can_terminate = can_terminate and op.pool_transfers_done\n        return can_terminate\n",
            "        if op.pool_transfers and not op.pool_transfers_done:\n            return False\n"
            "        return completed\n"), line=8, message="transfer state"),
    )

    def check(self, method: "MethodAnalysis") -> Iterable[Finding]:
        if not method.guard_in_decision:
            return  # configured: the check lives in the commit path (HC108)
        pred = f"'{sorted(method.predicates)[0]}'" if method.predicates else "a completion predicate local"
        for guard in method.guards:
            if guard.shape == VOTE_KEYED:
                what = f"is conditioned on the vote '{method.vote}', not on KV completion"
            elif guard.shape == TRANSFERS_ONLY:
                forced = "the result" if guard.target is None else f"'{guard.target}'"
                what = (f"forces {forced} to no on the transfer state alone, so under 'timeout' it also "
                        f"holds a prefetch whose KV is incomplete past its deadline")
            elif guard.shape == OTHER_LOCAL:
                what = f"forces '{guard.target}', which is neither the completion predicate nor the vote"
            else:
                continue
            yield self.finding(
                method, guard.line, guard.col,
                f"the {method.flag} guard in {method.qualname} {what}; condition it on {pred}",
            )
