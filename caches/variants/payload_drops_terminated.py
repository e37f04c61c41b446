"""payload_drops_terminated: hi_mamba_radix whose vote all-reduce carries the vote alone.

The MAX reduce must carry [1 - vote, terminated]: a rank that already
terminated an operation (a revoke after a failed load, while the operation
is still tracked and checked) must end it on every rank. Here the payload
drops the terminated element: only the vote crosses ranks, and each rank
reads back its own terminated flag, so only the rank that terminated the
operation stops; its peers keep waiting and never join its commit. On one
rank hi_mamba_radix skips the reduce (world size 1) and the local flag still
ends the wait, so no single-rank test can see the defect.

hi_mamba_radix's own can_terminate_prefetch runs unchanged; the defect sits
in the reducer it calls (one collective per vote, as before, one element
shorter).

Must be caught by: X1, in the multi-rank scenario where one rank's load
fails and revokes the operation while its peers' loads are held
(conformance/suite/test_multirank.py, test_terminated_on_one_rank_ends_it_everywhere).
"""

from __future__ import annotations

from typing import Any, Sequence

from caches.hi_mamba_radix import HiMambaRadixCache
from caches.variants._adapter import VariantAdapter, variant_of
from caches.variants._reducer import WrappedReducer
from spec.decision import VOTE_COLLECTIVE


class VoteOnlyReducer(WrappedReducer):
    """Wraps a reducer: the vote collective reduces [1 - vote] alone; the terminated element stays this rank's."""

    def all_reduce_max(self, values: Sequence[int], *, name: str, op: str | None = None, step: int | None = None) -> list[int]:
        if name != VOTE_COLLECTIVE:
            return self.inner.all_reduce_max(values, name=name, op=op, step=step)
        (no_votes,) = self.inner.all_reduce_max(list(values[:1]), name=name, op=op, step=step)
        return [no_votes, *values[1:]]  # the defect: the terminated flag never crosses ranks


class PayloadDropsTerminatedCache(HiMambaRadixCache):
    name = "payload_drops_terminated"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reducer = VoteOnlyReducer(self.reducer)


def payload_drops_terminated() -> VariantAdapter:
    return variant_of("hi_mamba_radix", "payload_drops_terminated", PayloadDropsTerminatedCache)
