"""vote_over_attn_tp_only: unified_radix whose vote collective reduces over its attention tensor-parallel group alone.

With attention context-parallel groups beside the tensor-parallel ones
(four ranks as 2x2), a vote must be reduced over both, so that it reaches
every rank (X1, X2); upstream's UnifiedRadixCache reduced over its TP group
alone until 4df1ccdad (PR #27330). Here the vote skips the attn_cp group: a
pair of ranks whose IO is done terminates while the other pair still
waits, and the pairs' commit collectives no longer meet. Its other
collectives, and everything with one group, are unified_radix's.

Must be caught by: X1 (a decision that is not the combine of every rank's
vote), in the cross-rank exploration over 2x2 vote groups
(conformance/suite/test_crossrank.py).
"""

from __future__ import annotations

from typing import Any, Sequence

from caches.core.process_groups import GroupedReducer
from caches.unified_radix import UnifiedRadixCache
from caches.variants._adapter import VariantAdapter, variant_of
from caches.variants._reducer import WrappedReducer
from spec.decision import VOTE_COLLECTIVE


class AttnTpVoteReducer(WrappedReducer):
    """Wraps a grouped reducer: the vote collective runs on the attn_tp group only (the last of its groups)."""

    def all_reduce_max(self, values: Sequence[int], *, name: str, op: str | None = None, step: int | None = None) -> list[int]:
        if name == VOTE_COLLECTIVE:
            return self.inner.reducers[-1].all_reduce_max(values, name=name, op=op, step=step)  # the defect
        return self.inner.all_reduce_max(values, name=name, op=op, step=step)


class VoteOverAttnTpOnlyCache(UnifiedRadixCache):
    name = "vote_over_attn_tp_only"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if isinstance(self.reducer, GroupedReducer) and len(self.reducer.reducers) > 1:
            self.reducer = AttnTpVoteReducer(self.reducer)


def vote_over_attn_tp_only() -> VariantAdapter:
    return variant_of("unified_radix", "vote_over_attn_tp_only", VoteOverAttnTpOnlyCache)
