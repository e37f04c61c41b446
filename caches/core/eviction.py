"""Eviction: which nodes may leave a tier, and what their slots become.

Device eviction demotes a backed-up node (its device slots freed) or deletes
one without backup; host eviction deletes host-only leaves. Slots are freed
through the copy tracker, so a slot a copy still touches is freed once that
copy ends (F9). The cache's hooks may veto a node (per-node data locked) and
learn what left; `make_room` is what slot accounting calls when it runs short.
"""

from __future__ import annotations

from typing import Callable, Sequence

from caches.core.parts import CorePart, CoreParts
from caches.core.slots import KV_GROUP, STATE_GROUP
from caches.core.state import node_states
from caches.core.tree import TreeNode
from spec.trace import DEVICE, HOST


class Eviction(CorePart):
    def __init__(self, parts: CoreParts, *, writing: Callable[[TreeNode], bool], before_device_eviction: Callable[[], None] | None) -> None:
        """writing(node): a device->host backup of the node is pending; before_device_eviction: write-back's backups."""
        super().__init__(parts)
        self.token_pools = parts.pools.token_pools
        self._writing = writing
        self._before_device_eviction = before_device_eviction

    def evict(self, num_tokens: int) -> int:
        """Free at least `num_tokens` device tokens if possible, least recently used first; returns tokens evicted."""
        if self._before_device_eviction is not None:
            self._before_device_eviction()
        return self.tree.evict(num_tokens, on_demote=self.drop_device, on_delete=self.drop_device, can_evict=self._device_evictable)

    def evict_host(self, num_tokens: int) -> int:
        """Free at least `num_tokens` host tokens if possible (storage keeps its pages); returns tokens evicted."""
        return self.tree.evict_host(num_tokens, on_delete=self.drop_host, can_evict=self._host_evictable)

    def evict_path(self, path: Sequence[TreeNode]) -> int:
        """Take these nodes off the device (a failed load-back left garbage there; a component evicts a leaf whole)."""
        return self.tree.evict(sum(len(p.key) for p in path), on_demote=self.drop_device, on_delete=self.drop_device,
                               can_evict=lambda n: n in path and self._device_evictable(n))

    def evict_host_nodes(self, nodes: Sequence[TreeNode]) -> int:
        """Delete these host-only leaves (a component evicts a host leaf whole); returns tokens evicted."""
        return self.tree.evict_host(sum(len(n.key) for n in nodes), on_delete=self.drop_host,
                                    can_evict=lambda n: n in nodes and self._host_evictable(n))

    def make_room(self, tier: str, group: str, short: int) -> None:
        """Slot accounting ran `short` slots short in this tier and group: the cache's own means first, then whole nodes.

        A window pool's group is its owner's alone (its eviction takes whole leaves itself).
        """
        if tier == DEVICE:
            left = self.hooks.make_device_room(group, short)
            if left > 0 and group not in self.hooks.windows:
                self.evict(left if group == KV_GROUP else self.page_size)
            return
        left = self.hooks.make_host_room(group, short)
        if left > 0 and group not in self.hooks.windows:
            self.evict_host(left if group == KV_GROUP else self.page_size)

    def _device_evictable(self, node: TreeNode) -> bool:
        return not self._writing(node) and self.hooks.device_evictable(node)

    def _host_evictable(self, node: TreeNode) -> bool:
        return all(ref.host_ref == 0 for ref in node_states(node).values()) and self.hooks.host_evictable(node)

    def drop_device(self, node: TreeNode) -> None:
        deleted = node.host_value is None  # no backup: the node leaves the tree
        self.copies.free(DEVICE, KV_GROUP, node.value, pools=self.token_pools)
        for pool, ref in node_states(node).items():
            if ref.device is not None:
                self.copies.free(DEVICE, STATE_GROUP, [ref.device], pools=[pool])
                ref.device = None
        self.hooks.on_device_evict(node, deleted=deleted)

    def drop_host(self, node: TreeNode) -> None:
        self.copies.free(HOST, KV_GROUP, node.host_value, pools=self.token_pools)
        for pool, ref in node_states(node).items():
            if ref.host is not None:
                self.copies.free(HOST, STATE_GROUP, [ref.host], pools=[pool])
                ref.host = None
        self.hooks.on_host_evict(node)
