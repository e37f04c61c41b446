"""anchor_pin_released_early: hiradix whose prefetch holds its anchor's host pin only while it takes host slots.

The pin is there so that making room for the prefetch's own slots cannot
evict the node its pages will hang below; this variant lets go of it as
soon as the operation is built. Host eviction that runs while the prefetch
loads (another request's room, an explicit eviction) then takes the anchor
with its host pages, and the commit hangs the loaded pages below a node the
tree no longer holds: a hit reported that no match can serve, and host
slots that never return.

Must be caught by: F8 (conformance/suite/test_anchor_pins.py).
"""

from __future__ import annotations


from caches.core.operation import PrefetchOperation
from caches.core.prefetch_path import PrefetchPath
from caches.core.tree import TreeNode
from caches.hiradix import HiRadixCache
from caches.variants._adapter import VariantAdapter, hiradix_variant


class EarlyUnpinPath(PrefetchPath):
    def _make(self, request_id: str, missing: list[int], anchor: TreeNode, pages: int) -> PrefetchOperation | None:
        try:
            return super()._make(request_id, missing, anchor, pages)
        finally:
            self.tree.unpin_host(anchor)  # the defect: the room is made, so the pin goes

    def _unpin(self, request_id: str, anchor: TreeNode) -> None:
        self.hooks.unpin_prefetch_anchor(request_id, anchor)  # the tree's pin went already


class AnchorPinReleasedEarlyCache(HiRadixCache):
    name = "anchor_pin_released_early"
    prefetch_path_class = EarlyUnpinPath


def anchor_pin_released_early() -> VariantAdapter:
    return hiradix_variant("anchor_pin_released_early", AnchorPinReleasedEarlyCache)
