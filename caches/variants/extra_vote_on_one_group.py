"""extra_vote_on_one_group: unified_radix whose last rank votes once more on one of its vote groups.

With several vote groups (attn_cp, attn_tp) the last rank runs its check's
vote a second time on its last group, as a scheduler whose trip count
depends on rank-local state would (upstream's hangs #30760, #33029,
#38273); its peers in that group do not, so that group's collectives no
longer pair and it hangs, while the other groups go on.

Must be caught by: L3, within seconds, naming the group, the rank and the step.
"""

from __future__ import annotations

from caches.core.process_groups import GroupedReducer
from caches.unified_radix import UnifiedRadixCache
from caches.variants._adapter import VariantAdapter, variant_of
from spec.decision import VOTE_COLLECTIVE


class ExtraVoteOnOneGroupCache(UnifiedRadixCache):
    name = "extra_vote_on_one_group"

    def can_terminate_prefetch(self, operation) -> bool:
        decided = super().can_terminate_prefetch(operation)
        reducer = self.reducer
        if isinstance(reducer, GroupedReducer) and self.rank == self.world_size - 1 and self.prefetch_stop_policy != "best_effort":
            # The defect: a rank-local second trip on one group only.
            reducer.reducers[-1].all_reduce_max([0, 0], name=VOTE_COLLECTIVE, op=operation.request_id, step=self._step)
        return decided


def extra_vote_on_one_group() -> VariantAdapter:
    return variant_of("unified_radix", "extra_vote_on_one_group", ExtraVoteOnOneGroupCache)
