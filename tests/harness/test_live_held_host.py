"""The host room a live session holds for other requests' data, so that a small host tier is met as upstream meets it:
a host tier larger than the device's (upstream asserts it), most of it taken, and a prefetch then takes the degraded
allocation path. Tested on a host pool shaped like upstream's (alloc returns None when short)."""

from __future__ import annotations

import pytest
import torch

from conformance.live.session import held_host_room


class ShortHostPool:
    def __init__(self, size: int) -> None:
        self.size = size
        self.free_slots = torch.arange(size)

    def alloc(self, need: int):
        if need > len(self.free_slots):
            return None
        out, self.free_slots = self.free_slots[:need], self.free_slots[need:]
        return out

    def available_size(self) -> int:
        return len(self.free_slots)


def test_the_held_room_leaves_exactly_the_room_asked_for():
    pool = ShortHostPool(32 * 4)
    held = held_host_room(pool, (32 - 3) * 4)
    assert len(held) == 29 * 4 and pool.available_size() == 3 * 4


def test_nothing_is_held_when_the_host_tier_is_the_size_asked_for():
    pool = ShortHostPool(16)
    assert len(held_host_room(pool, 0)) == 0 and pool.available_size() == 16


def test_a_host_tier_too_small_to_hold_it_says_so():
    with pytest.raises(AssertionError, match="could not hold 40 slots"):
        held_host_room(ShortHostPool(32), 40)
