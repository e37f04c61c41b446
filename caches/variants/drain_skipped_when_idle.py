"""drain_skipped_when_idle: hiradix whose scheduler step skips the drain's collective when nothing drains on this rank.

Each step agrees (one MIN collective) whether every rank's ended operations
are idle before freeing their slots. Here a rank with no ended operation
still in flight returns before that collective, as upstream's periodic
checks did when their own queue was empty (writing_check and loading_check
of UnifiedRadixCache before d03182cd2, PR #27489): its peers, whose ended
operation still has a transfer in flight, enter the collective alone, and
the group's collectives no longer pair. With one rank, or when every rank
drains alike, it behaves exactly like hiradix.

Must be caught by: L3, in the cross-rank exploration where one rank ends
the request with a transfer still held and its peer with none
(conformance/suite/test_crossrank.py).
"""

from __future__ import annotations

from caches.core.prefetch_path import PrefetchPath
from caches.hiradix import HiRadixCache
from caches.variants._adapter import VariantAdapter, hiradix_variant


class SkipWhenIdlePath(PrefetchPath):
    def drain_finished(self, step: int | None) -> None:
        if not self.draining:
            return  # the defect: an empty list here, a peer's not, and this rank skips the collective the peer is in
        super().drain_finished(step)


class DrainSkippedWhenIdleCache(HiRadixCache):
    name = "drain_skipped_when_idle"
    prefetch_path_class = SkipWhenIdlePath


def drain_skipped_when_idle() -> VariantAdapter:
    return hiradix_variant("drain_skipped_when_idle", DrainSkippedWhenIdleCache)
