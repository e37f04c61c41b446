"""Load-back: host pages of a matched prefix copied to the device, all or nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from caches.core.arguments import checked_count
from caches.core.pools import tensor_bytes_view
from caches.core.tree import TreeNode
from caches.errors import CacheArgumentError
from caches.storage import pool_key
from spec.trace import DEVICE, HOST, LOAD_BACK_COPY, EventKind, page_digest

if TYPE_CHECKING:
    from caches.core.cache_base import HierarchicalCache


class LoadBackPath:
    def load_back(self: "HierarchicalCache", node: TreeNode, quota_tokens: int | None = None) -> torch.Tensor | None:
        """Copy the host-only part of the path ending at `node` to the device.

        All or nothing: returns the new device slots, or None when the part is
        shorter than load_back_min_tokens, over `quota_tokens`, or does not fit.
        The copies may still run when this returns; readers wait on them.
        """
        self._load_back_arguments(node, quota_tokens)
        path: list[TreeNode] = []
        anchor = node
        while anchor is not self.tree.root and anchor.value is None:
            if anchor.host_value is None:
                return None
            path.append(anchor)
            anchor = anchor.parent
        path.reverse()
        if not path:
            return torch.empty(0, dtype=torch.int64)
        total = sum(len(p.key) for p in path)
        if total < self.config.load_back_min_tokens or (quota_tokens is not None and total > quota_tokens):
            return None
        self.tree.lock(anchor)  # eviction for room must not take the path's device ancestor
        try:
            device = self._alloc(DEVICE, "kv", total)
            if device is None:
                return None
            host = torch.cat([p.host_value for p in path])
            hashes = [h for p in path for h in p.hash_value]
            for pool in self.token_pools:
                self.copies.copy(
                    pool=pool, group="kv", direction=LOAD_BACK_COPY,
                    dst=self.device_pools[pool], dst_slots=device, src=self.host_pools[pool], src_slots=host,
                    on_done=self._load_back_done(pool, path, hashes, host, device),
                )
            offset = 0
            for p in path:
                self.tree.set_device_value(p, device[offset : offset + len(p.key)])
                offset += len(p.key)
            self._load_back_states(path[-1])
        finally:
            self.tree.unlock(anchor)
        self.stats.loaded_back_tokens += total
        return device

    def _load_back_arguments(self: "HierarchicalCache", node: TreeNode, quota_tokens: int | None) -> None:
        self._ensure_usable("load_back")
        if not self.tree.contains(node):
            raise CacheArgumentError("node", node, "a node of this cache's tree, as match_prefix returns it")
        if quota_tokens is not None:
            checked_count("quota_tokens", quota_tokens)

    def _load_back_states(self: "HierarchicalCache", last: TreeNode) -> None:
        for pool, ref in self.states(last).items():
            if ref.host is None or ref.device is not None:
                continue
            slot = self._alloc(DEVICE, "state", 1)
            if slot is None:
                continue
            self.copies.copy(
                pool=pool, group="state", direction=LOAD_BACK_COPY,
                dst=self.device_pools[pool], dst_slots=slot, src=self.host_pools[pool], src_slots=torch.tensor([ref.host]),
                on_done=self._load_back_done(pool, [last], [last.hash_value[-1]], torch.tensor([ref.host]), slot, width=1),
            )
            ref.device = int(slot[0])

    def _load_back_done(self: "HierarchicalCache", pool, path, hashes, host, device, width=None):
        width = self.page_size if width is None else width

        def done(ok: bool) -> None:
            if not ok:
                # The device copy is garbage: nothing may serve it (evict the path again).
                self.tree.evict(sum(len(p.key) for p in path), on_demote=self._drop_device, on_delete=self._drop_device,
                                can_evict=lambda n: n in path)
                return
            if not self.trace.enabled:
                return
            buffer = self.device_pools[pool]
            digests = []
            for index in range(len(hashes)):
                first = int(device[index * width])
                page = buffer.tensor[first : first + width].contiguous().cpu()
                digests.append(page_digest(tensor_bytes_view(page)))
            self.trace.record(
                EventKind.LOAD_BACK, pool=pool, space=HOST, slots=host,
                keys=[pool_key(h, pool) for h in hashes], digests=digests,
            )

        return done

    def read_device(self: "HierarchicalCache", device_slots: torch.Tensor, *, state_node: TreeNode | None = None) -> dict[str, torch.Tensor]:
        """Device bytes of every pool for these slots (after pending copies finish)."""
        self._ensure_usable("read_device")
        if state_node is not None and not self.tree.contains(state_node):
            raise CacheArgumentError("state_node", state_node, "None or a node of this cache's tree")
        self.copies.wait()
        out = {pool: self.device_pools[pool].read(device_slots).cpu() for pool in self.token_pools}
        if state_node is not None:
            for pool, ref in self.states(state_node).items():
                if ref.device is not None:
                    out[pool] = self.device_pools[pool].read(torch.tensor([ref.device])).cpu()
        return out
