"""Oracles that trust no cache: the bytes a request must carry and the slots its holders hold.

`Oracle.data` seeds each page's bytes by its chained page hash, so requests
sharing a prefix agree on it; `Oracle.held` counts the slots held by the
tree, by unacknowledged backups, by prefetch operations and by frees waiting
on copies, without asking the allocators; `assert_exact` compares the two.
"""

from __future__ import annotations

import math

import torch

from caches.core.hashing import page_hashes
from spec.trace import DEVICE, HOST

PS = 4


class Oracle:
    @staticmethod
    def request(seed: int, pages: int) -> list[int]:
        """A request of `pages` pages of PS tokens, distinct per seed."""
        return [seed * 1000 + i for i in range(pages * PS)]

    @staticmethod
    def data(cache, tokens) -> dict[str, torch.Tensor]:
        """Each page's rows are random bytes seeded by its chained hash; the state by the last page's."""
        hashes = page_hashes(tokens, cache.page_size)
        out = {}
        for index, spec in enumerate(cache.specs):
            row_bytes = math.prod(spec.elem_shape) * spec.dtype.itemsize
            seeds = hashes if spec.unit == "token" else hashes[-1:]
            rows_per_seed = cache.page_size if spec.unit == "token" else 1
            parts = []
            for h in seeds:
                g = torch.Generator().manual_seed(int(h[:15], 16) + index)
                parts.append(torch.randint(0, 256, (rows_per_seed, row_bytes), dtype=torch.uint8, generator=g))
            raw = torch.cat(parts) if parts else torch.empty(0, row_bytes, dtype=torch.uint8)
            out[spec.name] = raw.view(spec.dtype).reshape(-1, *spec.elem_shape)
        return out

    @classmethod
    def in_storage_only(cls, cache, seed: int, pages: int) -> tuple[list[int], dict[str, torch.Tensor]]:
        """A request written, backed up to storage and evicted from device and host: (its tokens, its data)."""
        tokens = cls.request(seed, pages)
        data = cls.data(cache, tokens)
        cache.write(tokens, data)
        cache.flush()
        cache.evict_all()
        return tokens, data

    @staticmethod
    def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
        return a.shape == b.shape and torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))

    @staticmethod
    def tree_held(cache) -> dict[str, int]:
        """Slots held per tier and group by the tree (and window owners) and by unacknowledged device->host backups."""
        windows = cache.hooks.windows
        held = {f"{space}:{group}": 0 for space in (DEVICE, HOST) for group in ("kv", "state", *windows)}
        for node in cache.tree.iter_nodes():
            held[f"{DEVICE}:kv"] += 0 if node.value is None else len(node.value)
            held[f"{HOST}:kv"] += 0 if node.host_value is None else len(node.host_value)
            for ref in cache.states(node).values():
                held[f"{DEVICE}:state"] += ref.device is not None
                held[f"{HOST}:state"] += ref.host is not None
            for pool, owner in windows.items():
                for space in (DEVICE, HOST):
                    slots = owner.slots(node, space)
                    held[f"{space}:{pool}"] += 0 if slots is None else len(slots)
        for pending in cache.write_path.pending:
            held[f"{HOST}:kv"] += sum(len(host) for _, host, _ in pending.parts)
            held[f"{HOST}:state"] += len(pending.states)
            for _, _, parts in pending.parts:
                for pool, slots in parts.items():
                    held[f"{HOST}:{pool}"] += len(slots)
        return held

    @classmethod
    def held(cls, cache) -> dict[str, int]:
        """tree_held, plus prefetch operations (ongoing or draining) and frees waiting on copies."""
        held = cls.tree_held(cache)
        for op in [*cache.ongoing_prefetch.values(), *cache.prefetches.draining]:
            for group, count in op.allocated_slots().items():
                held[f"{HOST}:{group}"] += count
        for (space, group), count in cache.copies.deferred_slots().items():
            held[f"{space}:{group}"] += count
        return held

    @classmethod
    def assert_exact(cls, cache) -> None:
        """allocated + free == capacity, and allocated == what the holders hold: no leak, no phantom."""
        held = cls.held(cache)
        for name, (allocated, free, capacity) in cache.slot_accounting().items():
            assert allocated + free == capacity, f"{name}: allocated {allocated} + free {free} != capacity {capacity}"
            assert allocated == held[name], f"{name}: {allocated} slots allocated, the holders hold {held[name]}"
