"""A host pool shaped like upstream's (free_slots, alloc, free), for the taps tests: slots are tensors, freed ones return."""

from __future__ import annotations

import torch


class HostPool:
    def __init__(self, size: int) -> None:
        self.free_slots = torch.arange(size)

    def alloc(self, need: int):
        out, self.free_slots = self.free_slots[:need], self.free_slots[need:]
        return out

    def free(self, indices) -> int:
        self.free_slots = torch.cat([self.free_slots, indices])
        return len(indices)
