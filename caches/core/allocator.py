"""Page-granular slot allocator shared by every pool (device, host, per-slot states).

Page ``p`` owns slots ``[p * page_size, (p + 1) * page_size)``. Slot tensors live on
the CPU: the copy engine moves them where a kernel needs them. A ``page_size`` of 1
gives a per-slot allocator (used for mamba states).

Thread-safe: the scheduler allocates while background IO threads free.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import torch

from caches.errors import CacheArgumentError, CacheError
from spec.errors import bounded_repr

__all__ = ["PageAllocator", "SlotError"]


class SlotError(CacheError, ValueError):
    """A free() request that names slots this allocator cannot take back."""


def _positive_int(field: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise CacheArgumentError(field, value, "an integer > 0")
    return value


class PageAllocator:
    """Hands out slot indices in whole pages, lowest-numbered free pages first.

    Freed pages are parked and merged back (sorted) only when the sorted free list
    runs short, so allocation stays cheap and fully deterministic.
    """

    def __init__(self, num_pages: int, page_size: int, *, name: str) -> None:
        self.num_pages = _positive_int("num_pages", num_pages)
        self.page_size = _positive_int("page_size", page_size)
        if not isinstance(name, str) or not name:
            raise CacheArgumentError("name", name, "a non-empty string")
        self.name = name
        self.capacity_slots = self.num_pages * self.page_size
        self._lock = threading.Lock()
        self._page_offsets = torch.arange(self.page_size, dtype=torch.int64)
        self._is_allocated = torch.zeros(self.num_pages, dtype=torch.bool)
        self._free_pages = torch.arange(self.num_pages, dtype=torch.int64)
        self._released: list[torch.Tensor] = []
        self._num_free_pages = self.num_pages

    def __repr__(self) -> str:
        return (
            f"PageAllocator(name={self.name!r}, num_pages={self.num_pages}, "
            f"page_size={self.page_size}, free_slots={self.free_slots()})"
        )

    def free_slots(self) -> int:
        with self._lock:
            return self._num_free_pages * self.page_size

    def allocated_slots(self) -> int:
        with self._lock:
            return (self.num_pages - self._num_free_pages) * self.page_size

    def alloc(self, num_slots: int) -> torch.Tensor | None:
        """``num_slots`` slots (a multiple of page_size), or None when not enough are free."""
        if (
            isinstance(num_slots, bool)
            or not isinstance(num_slots, int)
            or num_slots < 0
            or num_slots % self.page_size
        ):
            raise CacheArgumentError(
                f"num_slots of allocator {self.name!r}", num_slots, f"an integer >= 0, a multiple of page_size {self.page_size}"
            )
        num_pages = num_slots // self.page_size
        with self._lock:
            if num_pages > self._num_free_pages:
                return None
            if num_pages > len(self._free_pages):
                self._merge_released()
            pages = self._free_pages[:num_pages]
            self._free_pages = self._free_pages[num_pages:]
            self._is_allocated[pages] = True
            self._num_free_pages -= num_pages
        return (pages.unsqueeze(1) * self.page_size + self._page_offsets).reshape(-1)

    def free(self, slots: torch.Tensor | Sequence[int]) -> None:
        """Return whole pages; on any bad slot nothing is freed and SlotError is raised."""
        flat = self._as_slot_tensor(slots)
        if flat.numel() == 0:
            return
        pages = self._whole_pages(flat)
        with self._lock:
            not_allocated = ~self._is_allocated[pages]
            if bool(not_allocated.any()):
                page = int(pages[not_allocated][0])
                raise SlotError(
                    f"allocator {self.name!r}: slot {page * self.page_size} "
                    f"(page {page}) is not allocated (double free or never allocated)"
                )
            self._is_allocated[pages] = False
            self._released.append(pages)
            self._num_free_pages += len(pages)

    # -- internals -------------------------------------------------------------

    def _merge_released(self) -> None:
        merged = torch.cat([self._free_pages, *self._released])
        self._free_pages = torch.sort(merged).values
        self._released = []

    def _as_slot_tensor(self, slots: torch.Tensor | Sequence[int]) -> torch.Tensor:
        if isinstance(slots, torch.Tensor):
            if slots.dtype == torch.bool or slots.is_floating_point() or slots.is_complex():
                raise SlotError(
                    f"allocator {self.name!r}: slots have dtype {slots.dtype}: "
                    "expected an integer tensor"
                )
            return slots.detach().reshape(-1).to(device="cpu", dtype=torch.int64)
        try:
            flat = torch.as_tensor(list(slots))
        except (TypeError, ValueError, RuntimeError) as exc:
            raise SlotError(
                f"allocator {self.name!r}: slots {bounded_repr(slots)} are not a sequence of ints"
            ) from exc
        if flat.numel() and (flat.dtype == torch.bool or flat.is_floating_point()):
            raise SlotError(
                f"allocator {self.name!r}: slots {bounded_repr(slots)} are not a sequence of ints"
            )
        return flat.reshape(-1).to(torch.int64)

    def _whole_pages(self, flat: torch.Tensor) -> torch.Tensor:
        """Distinct pages covered by ``flat``; SlotError unless it is whole, in-range pages."""
        out_of_range = (flat < 0) | (flat >= self.capacity_slots)
        if bool(out_of_range.any()):
            slot = int(flat[out_of_range][0])
            raise SlotError(
                f"allocator {self.name!r}: slot {slot} is out of range: accepted "
                f"[0, {self.capacity_slots})"
            )
        ordered = torch.sort(flat).values
        repeated = ordered[1:] == ordered[:-1]
        if bool(repeated.any()):
            slot = int(ordered[1:][repeated][0])
            raise SlotError(
                f"allocator {self.name!r}: slot {slot} appears more than once in one free()"
            )
        if self.page_size == 1:
            return ordered
        if len(ordered) % self.page_size == 0:
            # Sorted and distinct: a row is one whole page iff it starts on a page
            # boundary and ends page_size - 1 slots later.
            rows = ordered.view(-1, self.page_size)
            firsts = rows[:, 0]
            aligned = firsts % self.page_size == 0
            filled = rows[:, -1] == firsts + (self.page_size - 1)
            if bool((aligned & filled).all()):
                return firsts // self.page_size
        # Distinct slots that are not a union of whole pages leave some page partial.
        pages = ordered // self.page_size
        counts = torch.bincount(pages)
        page = int(torch.nonzero((counts != 0) & (counts != self.page_size))[0])
        expected = page * self.page_size + self._page_offsets
        missing = int(expected[~torch.isin(expected, ordered[pages == page])][0])
        raise SlotError(
            f"allocator {self.name!r}: free() covers part of page {page}: slot "
            f"{missing} is missing; only whole pages of {self.page_size} slots "
            "can be freed"
        )
