"""Slot accounting: one allocator per tier and slot group, and who may take from it.

A *slot group* is a range of slot numbers several pools may share: group
"kv" holds the token pools (KV, and the indexer, which reuses the KV slot
numbers in buffers of its own), one page of `page_size` slots per unit;
group "state" holds state pools (mamba), one slot per unit. A cache with
another kind of per-node data (a sliding window with its own slots) adds a
group: nothing here knows the pools' meaning.

`alloc` is the one way slots leave an allocator: when it runs short it first
settles frees waiting on copies, then asks the cache to make room (eviction),
and records an ALLOC per pool living in those slot numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import torch

from caches.core.allocator import PageAllocator
from spec.trace import DEVICE, HOST, EventKind, TraceRecorder

KV_GROUP = "kv"
STATE_GROUP = "state"
TIERS = (DEVICE, HOST)

# (tier, group, slots short) -> evict something from that tier
MakeRoom = Callable[[str, str, int], None]


@dataclass(frozen=True)
class SlotGroup:
    name: str
    unit: int  # slots per allocation unit
    pools: tuple[str, ...]  # pools whose data lives in these slot numbers
    capacity: Mapping[str, int]  # tier -> units


class SlotAccounting:
    def __init__(self, owner: str, groups: Sequence[SlotGroup], trace: TraceRecorder) -> None:
        self.groups = {g.name: g for g in groups}
        self.trace = trace
        self._group_of = {pool: g.name for g in groups for pool in g.pools}
        self._allocators = {
            (tier, g.name): PageAllocator(g.capacity[tier], g.unit, name=f"{owner} {tier} {g.name}")
            for g in groups
            for tier in TIERS
        }
        self._settle: Callable[[], bool] = lambda: False
        self._make_room: MakeRoom = lambda tier, group, short: None

    def bind(self, *, settle: Callable[[], bool], make_room: MakeRoom) -> None:
        """settle(): run frees that wait on copies, True if it waited; make_room(): evict from a tier."""
        self._settle = settle
        self._make_room = make_room

    # --- who holds what ----------------------------------------------------------

    def group_of(self, pool: str) -> str:
        return self._group_of[pool]

    def units(self) -> dict[str, int]:
        return {name: g.unit for name, g in self.groups.items()}

    def free_slots(self, tier: str, group: str) -> int:
        return self._allocators[(tier, group)].free_slots()

    def accounting(self) -> dict[str, tuple[int, int, int]]:
        """(allocated, free, capacity) per tier and slot group; allocated + free == capacity."""
        return {
            f"{tier}:{group}": (a.allocated_slots(), a.free_slots(), a.capacity_slots)
            for (tier, group), a in self._allocators.items()
        }

    # --- taking and returning ------------------------------------------------------

    def alloc(self, tier: str, group: str, count: int, *, op: str | None = None) -> torch.Tensor | None:
        """`count` slots, making room once if needed; None when they cannot fit.

        Records one ALLOC per pool of the group, owned by `op` (a prefetch) or,
        with op None, bound for the tree.
        """
        allocator = self._allocators[(tier, group)]
        slots = allocator.alloc(count)
        if slots is None and self._settle():
            # Frees waiting on copies finish at thread-timed moments: settle them so
            # every rank decides whether to evict on the same state.
            slots = allocator.alloc(count)
        if slots is None:
            self._make_room(tier, group, count - allocator.free_slots())
            self._settle()
            slots = allocator.alloc(count)
        if slots is not None and self.trace.enabled:
            for pool in self.groups[group].pools:
                self.trace.record(EventKind.ALLOC, op=op, pool=pool, space=tier, slots=slots)
        return slots

    def ensure_free(self, tier: str, group: str, count: int) -> int:
        """Make room for `count` slots without taking them; returns the slots free now."""
        if self.free_slots(tier, group) < count:
            self._settle()
        if self.free_slots(tier, group) < count:
            self._make_room(tier, group, count - self.free_slots(tier, group))
            self._settle()
        return self.free_slots(tier, group)

    def release(self, tier: str, group: str, slots: torch.Tensor | Sequence[int]) -> None:
        """Return slots to their allocator now (callers make sure no copy touches them: F9)."""
        self._allocators[(tier, group)].free(slots)
