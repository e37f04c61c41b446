"""Load-back: host pages of a matched prefix copied to the device, all or nothing."""

from __future__ import annotations

from typing import Callable

import torch

from caches.core.arguments import checked_count
from caches.core.eviction import Eviction
from caches.core.parts import CorePart, CoreParts
from caches.core.pools import check_slots, tensor_bytes_view
from caches.core.slots import KV_GROUP, STATE_GROUP
from caches.core.state import node_states
from caches.core.tree import TreeNode
from caches.core.tree_node import concat_slots
from caches.core.windows import device_window, host_only_windows
from caches.errors import CacheArgumentError
from caches.storage import pool_key
from spec.trace import DEVICE, HOST, LOAD_BACK_COPY, EventKind, page_digest


class LoadBackPath(CorePart):
    def __init__(self, parts: CoreParts, *, eviction: Eviction) -> None:
        super().__init__(parts)
        self.eviction = eviction

    def load_back(self, node: TreeNode, quota_tokens: int | None = None) -> torch.Tensor | None:
        """Copy the host-only part of the path ending at `node` to the device, and of the windows before it.

        All or nothing: returns the new device slots, or None when the part is
        shorter than load_back_min_tokens, over `quota_tokens`, or does not fit.
        The copies may still run when this returns; readers wait on them.
        """
        if not self.tree.contains(node):
            raise CacheArgumentError("node", node, "a node of this cache's tree, as match_prefix returns it")
        if quota_tokens is not None:
            checked_count("quota_tokens", quota_tokens)
        # The cache's per-node data on the path stays while room is made.
        self.hooks.lock(node)
        try:
            return self._load_back(node, quota_tokens)
        finally:
            self.hooks.unlock(node)

    def _load_back(self, node: TreeNode, quota_tokens: int | None) -> torch.Tensor | None:
        path: list[TreeNode] = []
        anchor = node
        while anchor is not self.tree.root and anchor.value is None:
            if anchor.host_value is None:
                return None
            path.append(anchor)
            anchor = anchor.parent
        path.reverse()
        # Window pools: the pages of the window ending at `node` whose data is on the host only.
        windows = host_only_windows(self.hooks.windows, node)
        if not path and not windows:
            return torch.empty(0, dtype=torch.int64)
        total = sum(len(p.key) for p in path)
        if path and (total < self.config.load_back_min_tokens or (quota_tokens is not None and total > quota_tokens)):
            return None
        self.tree.lock(anchor)  # eviction for room must not take the path's device ancestor
        try:
            taken = self._take_device_slots(total, windows)
            if taken is None:
                return None
            device, window_slots = taken
            if path:
                self._copy_pages(self.pools.token_pools, KV_GROUP, path, concat_slots([p.host_value for p in path], device[:0]), device)
                offset = 0
                for p in path:
                    self.tree.set_device_value(p, device[offset : offset + len(p.key)])
                    offset += len(p.key)
            for pool, nodes in windows.items():
                owner = self.hooks.windows[pool]
                self._copy_pages([pool], pool, nodes, torch.cat([owner.slots(n, HOST) for n in nodes]), window_slots[pool])
                offset = 0
                for n in nodes:
                    owner.set_slots(n, DEVICE, window_slots[pool][offset : offset + len(n.key)])
                    offset += len(n.key)
            if path:
                self._load_back_states(path[-1])
        finally:
            self.tree.unlock(anchor)
        self.stats.loaded_back_tokens += total
        return device

    def _take_device_slots(self, total: int, windows: dict[str, list[TreeNode]]) -> tuple[torch.Tensor, dict[str, torch.Tensor]] | None:
        """Device slots for the KV path and every window's host-only nodes, all or nothing (nothing is copied yet)."""
        device = self.slots.alloc(DEVICE, KV_GROUP, total) if total else torch.empty(0, dtype=torch.int64)
        if device is None:
            return None
        taken: dict[str, torch.Tensor] = {}
        for pool, nodes in windows.items():
            slots = self.slots.alloc(DEVICE, pool, sum(len(n.key) for n in nodes))
            if slots is None:
                for other, got in taken.items():
                    self.copies.free(DEVICE, other, got, pools=[other])
                if total:
                    self.copies.free(DEVICE, KV_GROUP, device, pools=self.pools.token_pools)
                return None
            taken[pool] = slots
        return device, taken

    def _copy_pages(self, pools: list[str], group: str, nodes: list[TreeNode], host: torch.Tensor, device: torch.Tensor) -> None:
        hashes = [h for n in nodes for h in n.hash_value]
        for pool in pools:
            self.copies.copy(
                pool=pool, group=group, direction=LOAD_BACK_COPY,
                dst=self.pools.device[pool], dst_slots=device, src=self.pools.host[pool], src_slots=host,
                on_done=self._done(pool, nodes, hashes, host, device),
            )

    def _load_back_states(self, last: TreeNode) -> None:
        wanted = [(pool, ref) for pool, ref in node_states(last).items() if ref.host is not None and ref.device is None]
        if not wanted:
            return
        # Making room for a state slot evicts device nodes: the path just loaded
        # must stay, and its end must keep the state it receives.
        self.tree.lock(last)
        try:
            for pool, ref in wanted:
                slot = self.slots.alloc(DEVICE, STATE_GROUP, 1)
                if slot is None:
                    continue
                host = torch.tensor([ref.host])
                self.copies.copy(
                    pool=pool, group=STATE_GROUP, direction=LOAD_BACK_COPY,
                    dst=self.pools.device[pool], dst_slots=slot, src=self.pools.host[pool], src_slots=host,
                    on_done=self._done(pool, [last], [last.hash_value[-1]], host, slot, width=1),
                )
                ref.device = int(slot[0])
        finally:
            self.tree.unlock(last)

    def _done(self, pool: str, path: list[TreeNode], hashes: list[str], host: torch.Tensor, device: torch.Tensor,
              width: int | None = None) -> Callable[[bool], None]:
        width = self.page_size if width is None else width

        def done(ok: bool) -> None:
            if not ok:
                # The device copy is garbage: nothing may serve it (evict the path again, or drop the window).
                owner = self.hooks.windows.get(pool)
                if owner is None:
                    self.eviction.evict_path(path)
                else:
                    for n in path:
                        owner.drop(n, DEVICE)
                return
            if not self.trace.enabled:
                return
            buffer = self.pools.device[pool]
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

    def read_device(self, device_slots: torch.Tensor, *, state_node: TreeNode | None = None) -> dict[str, torch.Tensor]:
        """Device bytes of every pool for these slots (after pending copies finish)."""
        check_slots(device_slots, self.pools.device["kv"].num_slots, "device_slots")  # named as the caller knows it
        if state_node is not None and not self.tree.contains(state_node):
            raise CacheArgumentError("state_node", state_node, "None or a node of this cache's tree")
        self.copies.wait()
        out = {pool: self.pools.device[pool].read(device_slots).cpu() for pool in self.pools.token_pools}
        if state_node is not None:
            for pool, ref in node_states(state_node).items():
                if ref.device is not None:
                    out[pool] = self.pools.device[pool].read(torch.tensor([ref.device])).cpu()
            for pool, owner in self.hooks.windows.items():
                window = device_window(owner, state_node)
                if window is not None:  # the rows of the last window_tokens tokens (fewer for a shorter prefix)
                    out[pool] = self.pools.device[pool].read(window).cpu()
        return out
