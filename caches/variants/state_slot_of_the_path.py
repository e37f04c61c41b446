"""state_slot_of_the_path: unified_radix whose load-back, finding no device slot for a state, takes the one its path holds.

Load-back pins the whole path it loads, so a state of a shorter prefix on
that path cannot be evicted to make room for the longer prefix's state.
With one device state slot, that slot is the shorter prefix's: this
load-back copies the longer prefix's state over it and points both prefix
ends at it. The longer prefix is served its own state; the shorter one,
matched again, is served the longer one's state as its own.

Must be caught by: S5 (conformance/suite/test_state_room.py).
"""

from __future__ import annotations

import torch

from caches.core.load_back import LoadBackPath
from caches.core.state import node_states
from caches.core.tree import TreeNode
from caches.unified_radix import UnifiedRadixCache
from caches.variants._adapter import VariantAdapter, variant_of
from caches.core.slots import STATE_GROUP
from spec.trace import DEVICE, LOAD_BACK_COPY


class PathSlotLoadBack(LoadBackPath):
    def _load_back_states(self, last: TreeNode) -> None:
        self.tree.lock(last)
        try:
            for pool, ref in node_states(last).items():
                if ref.host is None or ref.device is not None:
                    continue
                slot = self.slots.alloc(DEVICE, STATE_GROUP, 1)
                if slot is None:
                    # The defect: no slot left, so the path's own is taken; the shorter prefix's end still points at it.
                    held = next((node_states(n)[pool].device for n in _ancestors(last)
                                 if pool in node_states(n) and node_states(n)[pool].device is not None), None)
                    if held is None:
                        continue
                    slot = torch.tensor([held])
                host = torch.tensor([ref.host])
                self.copies.copy(pool=pool, group=STATE_GROUP, direction=LOAD_BACK_COPY, dst=self.pools.device[pool],
                                 dst_slots=slot, src=self.pools.host[pool], src_slots=host,
                                 on_done=self._done(pool, [last], [last.hash_value[-1]], host, slot, width=1))
                ref.device = int(slot[0])
        finally:
            self.tree.unlock(last)


def _ancestors(node: TreeNode):
    node = node.parent
    while node is not None:
        yield node
        node = node.parent


class StateSlotOfThePathCache(UnifiedRadixCache):
    name = "state_slot_of_the_path"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.load_back_path.__class__ = PathSlotLoadBack  # the same parts, the defective state copy


def state_slot_of_the_path() -> VariantAdapter:
    return variant_of("unified_radix", "state_slot_of_the_path", StateSlotOfThePathCache)
