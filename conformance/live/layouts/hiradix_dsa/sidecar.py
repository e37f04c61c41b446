"""The DSA indexer as a sidecar: an ALL_PAGES pool on the KV pool's host slots (indices_from_pool=KV).

Its device rows sit at the KV device slots, its host pages at the KV host
slots (DSAIndexerPoolHost, one page per KV page), and storage keeps each
page as '<hash>.indexer'. It has no slots of its own: its host pool's own
free list must stay whole, each slot in it once (a free of KV's slots
mirrored into it is each slot freed a second time there: S3).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import torch

from conformance.live.layouts.hiradix_dsa.tier import INDEXER, IndexerRows
from conformance.live.sidecar import Sidecar
from conformance.live.taps import Taps, tensor_digest
from conformance.live.taps.host import track_derived_pool
from spec.trace import EventKind


class IndexerSidecar(Sidecar):
    name = INDEXER
    rides_kv_slots = True

    def __init__(self, device_pool: Any, host_pool: Any, storage: Any, file_name: Callable[[str], str]) -> None:
        self.rows = IndexerRows(device_pool)
        self.layout = self.rows.layout
        self.host = host_pool
        self.storage = storage  # upstream's hicache_storage module: PoolTransfer, PoolName
        self.file_name = file_name
        self.trace: Any = None

    def tap(self, taps: Taps) -> None:
        self.trace = taps.trace
        track_derived_pool(taps, INDEXER)

    def stage(self, slots: torch.Tensor, data: Mapping[str, torch.Tensor]) -> None:
        self.rows.write(slots, data[INDEXER])

    def record_load_back(self, match: Any, host_pages: list[tuple[int, str]]) -> None:
        if not host_pages:
            return
        slots = [slot for slot, _ in host_pages]
        keys = [self.file_name(f"{key}.{INDEXER}") for _, key in host_pages]
        digests = [tensor_digest(self.host.get_data_page(slot, flat=True)) for slot in slots]
        self.trace.record(EventKind.LOAD_BACK, pool=INDEXER, slots=slots, keys=keys, digests=digests)

    def loaded(self, match: Any, device_slots: torch.Tensor) -> torch.Tensor | None:
        return self.rows.read(device_slots)

    def accounting(self) -> dict[str, tuple[int, int, int]]:
        """(allocated, free, capacity) of the indexer host pool's own allocator: allocated counts the slots missing from
        its free list, free every entry in it, so a slot listed twice (freed twice) breaks allocated + free == capacity."""
        return {f"host:{INDEXER}": own_allocator_accounting(self.host)}

    def probe_transfer(self) -> Any:
        s = self.storage
        return s.PoolTransfer(name=s.PoolName.INDEXER, hit_policy=s.PoolHitPolicy.ALL_PAGES, indices_from_pool=s.PoolName.KV)


def own_allocator_accounting(pool: Any) -> tuple[int, int, int]:
    """(allocated, free, capacity) of an upstream host pool from its free list (free_slots, and release_slots where frees
    are kept aside until an alloc merges them); a pool without one is read from available_size() alone."""
    capacity, free = int(getattr(pool, "logical_size", pool.size)), int(pool.available_size())
    listed = getattr(pool, "free_slots", None)
    if not isinstance(listed, torch.Tensor):
        return capacity - free, free, capacity
    listed = torch.cat([listed.reshape(-1).cpu(), *(t.reshape(-1).cpu() for t in getattr(pool, "release_slots", []) or [])])
    return capacity - int(listed.unique().numel()), free, capacity
