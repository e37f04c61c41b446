"""The sliding-window component: per-node sliding-window KV that only the window before a match end needs.

It owns its data: per node, device slots and host slots of the "swa" pool
(a slot group of its own), each either for every token of the node or none
(a tombstone: the node keeps its full-attention KV). It owns its LRUs (one
per tier) and its eviction, which may drop the window data of inner nodes
while their KV stays, and evicts a leaf whole (every component's data, as
upstream's cascade does at leaves). A match may end only where every node of
the window before the end carries its data on some tier (spec clause F10):
a tombstone serves no match end within the window after it, and a load-back
brings the host-only part of the window to the device (the match says when
one is needed, even under device KV: MatchResult.needs_load_back).

The core moves the bytes (caches/core/windows.py): it asks this component
which slots a node holds, hands it the slots of a write, a backup, a
load-back or a prefetch commit, and lets it take room in its slot group.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from caches.core.arguments import checked_count
from caches.core.copies import CopyTracker
from caches.core.pools import PoolBuffer
from caches.core.slots import SlotAccounting
from caches.core.tree import RadixTree, TreeNode
from caches.errors import CacheArgumentError
from caches.unified.components import ComponentBase, ComponentData
from spec.fence import HitPolicy
from spec.trace import DEVICE, HOST

# (node, tier) -> drop the data of components of lower priority on that node (the cascade)
Cascade = Callable[[TreeNode, str], None]
# nodes -> evict them whole from a tier through the core; returns tokens evicted
EvictNodes = Callable[[Sequence[TreeNode]], int]


@dataclass
class WindowData(ComponentData):
    value: torch.Tensor | None = None  # device slots, one per token of the node
    host_value: torch.Tensor | None = None  # host slots, likewise


class SlidingWindow(ComponentBase):
    name = "swa"
    hit_policy = HitPolicy.TRAILING_WINDOW
    data_class = WindowData
    priority = 1  # below full attention, above mamba: dropping a window drops the state that needs it

    def __init__(
        self,
        tree: RadixTree,
        copies: CopyTracker,
        slots: SlotAccounting,
        device_pool: PoolBuffer,
        *,
        evict_device_nodes: EvictNodes,
        evict_host_nodes: EvictNodes,
        cascade: Cascade,
    ) -> None:
        super().__init__(tree)
        self.pool = device_pool.name
        self.pools = (self.pool,)
        self.window_tokens = device_pool.spec.window_tokens
        self._copies = copies
        self._slots = slots
        self._device_pool = device_pool
        self._evict_device_nodes = evict_device_nodes
        self._evict_host_nodes = evict_host_nodes
        self._cascade = cascade
        self._host_lru: OrderedDict[int, TreeNode] = OrderedDict()  # the device LRU is ComponentBase's

    # --- the data, per node and tier (caches/core/windows.py) ------------------------------

    def _window(self, node: TreeNode) -> WindowData | None:
        return self._peek(node)  # type: ignore[return-value]

    def slots(self, node: TreeNode, tier: str) -> torch.Tensor | None:
        data = self._window(node)
        if data is None:
            return None
        return data.value if tier == DEVICE else data.host_value

    def set_slots(self, node: TreeNode, tier: str, slots: torch.Tensor) -> None:
        data: WindowData = self.data(node)  # type: ignore[assignment]
        if len(slots) != len(node.key) or (data.value if tier == DEVICE else data.host_value) is not None:
            raise CacheArgumentError(f"{tier} {self.name} slots of node {node.id}", slots, f"{len(node.key)} slots, for a node without {tier} data")
        if tier == DEVICE:
            data.value = slots.clone()
        else:
            data.host_value = slots.clone()
        self.touch(node)

    def drop(self, node: TreeNode, tier: str) -> None:
        data = self._window(node)
        held = None if data is None else (data.value if tier == DEVICE else data.host_value)
        if held is None:
            return
        self._copies.free(tier, self.pool, held, pools=[self.pool])  # once no copy touches them (F9)
        if tier == DEVICE:
            data.value = None
            self._lru.pop(node.id, None)
        else:
            data.host_value = None
            self._host_lru.pop(node.id, None)

    def holds_data(self, node: TreeNode) -> bool:
        return self.slots(node, DEVICE) is not None or self.slots(node, HOST) is not None

    # --- the window before a match end ---------------------------------------------------

    def window_walk(self, end: TreeNode) -> list[TreeNode]:
        """The nodes holding the last window_tokens tokens before `end`'s end, nearest the root first."""
        nodes: list[TreeNode] = []
        covered = 0
        node = end
        while node is not self._tree.root and covered < self.window_tokens:
            nodes.append(node)
            covered += len(node.key)
            node = node.parent
        nodes.reverse()
        return nodes

    def window_nodes(self, end: TreeNode) -> list[TreeNode] | None:
        nodes = self.window_walk(end)
        return nodes if all(self.holds_data(n) for n in nodes) else None

    def accepts_match_end(self, node: TreeNode) -> bool:
        """F10: every node of the window before the end carries the window, on the device or the host.

        A host-only part is served from the host: the match reports it
        (MatchResult.host_window_tokens) and load-back brings it.
        """
        return self.window_nodes(node) is not None

    def accepts_anchor(self, node: TreeNode) -> bool:
        """A prefetch's new ends may need the window before its anchor: it must be whole there."""
        return self.accepts_match_end(node)

    def _range(self, end: TreeNode, tokens: int) -> list[tuple[TreeNode, int]]:
        """The nodes covering the last `tokens` tokens before `end`'s end, each with its offset into that range.

        A node straddling the range's start is split there first, so that every
        node returned lies wholly inside the range.
        """
        nodes: list[TreeNode] = []
        left = tokens
        node = end
        while left > 0 and node is not self._tree.root:
            if len(node.key) > left:
                self._tree.split(node, len(node.key) - left)  # `node` keeps the tail, the part inside
            nodes.append(node)
            left -= len(node.key)
            node = node.parent
        nodes.reverse()
        offsets, at = [], 0
        for n in nodes:
            offsets.append((n, at))
            at += len(n.key)
        return offsets

    # --- data entering ---------------------------------------------------------------------

    def store_write(self, end: TreeNode, rows: torch.Tensor) -> None:
        """A write: keep the window before `end` on the device for the nodes lacking it (no room: cached without it)."""
        depth = self._tree.depth(end)
        tokens = min(self.window_tokens, depth)
        placed = self._range(end, tokens)
        wanted = [(n, at) for n, at in placed if self.slots(n, DEVICE) is None]
        if not wanted:
            return
        count = sum(len(n.key) for n, _ in wanted)
        self._tree.lock(end)  # room is made by eviction: never of the nodes this write just placed
        for n, _ in placed:
            self.data(n).lock_ref += 1
        try:
            slots = self._slots.alloc(DEVICE, self.pool, count)
        finally:
            for n, _ in placed:
                self.data(n).lock_ref -= 1
            self._tree.unlock(end)
        if slots is None:
            return
        base = depth - tokens
        offset = 0
        for n, at in wanted:
            part = slots[offset : offset + len(n.key)]
            self._device_pool.write(part, rows[base + at : base + at + len(n.key)])
            self.set_slots(n, DEVICE, part)
            offset += len(n.key)

    def attach(self, end: TreeNode, slots: Sequence[int]) -> list[int]:
        """A prefetch commit: host slots of the last len(slots) tokens before `end`, for nodes without host data."""
        taken: list[int] = []
        for n, at in self._range(end, len(slots)):
            if self.slots(n, HOST) is not None:
                continue  # the node already has them: the commit frees these
            part = list(slots[at : at + len(n.key)])
            self.set_slots(n, HOST, torch.tensor(part, dtype=torch.int64))
            taken += part
        return taken

    # --- locks: the window before the node --------------------------------------------------

    def _locked_path(self, node: TreeNode) -> list[TreeNode]:
        # Taken and released within one call (load-back), with no split in between.
        return self.window_walk(node)

    def on_match(self, path: Sequence[TreeNode]) -> None:
        """Only the window before the end becomes recent: ancestors outside it stay evictable."""
        if path:
            for n in self.window_walk(path[-1]):
                self.touch(n)

    def touch(self, node: TreeNode) -> None:
        if node is self._tree.root:
            return
        for tier, lru in ((DEVICE, self._lru), (HOST, self._host_lru)):
            lru.pop(node.id, None)
            if self.slots(node, tier) is not None:
                lru[node.id] = node

    def forget(self, node: TreeNode) -> None:
        self._lru.pop(node.id, None)
        self._host_lru.pop(node.id, None)

    # --- the tree's events ----------------------------------------------------------------

    def on_split(self, head: TreeNode, tail: TreeNode) -> None:
        data = self._window(tail)
        if data is not None:
            cut = len(head.key)
            # `tail` kept its old slots: the head takes their first `cut`.
            for attr in ("value", "host_value"):
                held = getattr(data, attr)
                if held is not None:
                    setattr(self.data(head), attr, held[:cut].clone())
                    setattr(data, attr, held[cut:].clone())
        self.touch(head)
        self.touch(tail)

    def on_device_evict(self, node: TreeNode, *, deleted: bool) -> None:
        """Full attention left the device (the cascade from above): the window goes with it."""
        self.drop(node, DEVICE)
        if deleted:
            self.drop(node, HOST)
            self.forget(node)

    def on_host_evict(self, node: TreeNode) -> None:
        self.drop(node, HOST)
        self.forget(node)

    # --- its own eviction -----------------------------------------------------------------

    def _pinned(self, node: TreeNode, tier: str) -> bool:
        """Locked by this component, or (host) read by a storage backup or extended by a prefetch.

        Device copies need no pin: a slot a copy still reads is freed once it ends (F9).
        """
        data = self._window(node)
        own = data is not None and (data.lock_ref > 0 or (tier == HOST and data.host_ref > 0))
        return own or (tier == HOST and node.host_ref > 0)

    def evict_device(self, count: int) -> int:
        """Free at least `count` device window slots, least recently used first; returns slots freed.

        An inner node keeps its KV (a tombstone); a device leaf is evicted whole.
        """
        return self._evict(DEVICE, checked_count("count", count))

    def evict_host(self, count: int) -> int:
        """Free at least `count` host window slots, least recently used first; returns slots freed.

        Skips what a prefetch, a storage backup or a lock holds. A host-only
        leaf is evicted whole; any other node keeps its KV.
        """
        return self._evict(HOST, checked_count("count", count))

    def _evict(self, tier: str, count: int) -> int:
        freed = 0
        for node in list((self._lru if tier == DEVICE else self._host_lru).values()):
            if freed >= count:
                break
            held = self.slots(node, tier)
            if held is None or self._pinned(node, tier):
                continue
            if tier == DEVICE:
                whole = all(child.value is None for child in node.children.values()) and self._evict_device_nodes([node])
            else:
                whole = node.value is None and not node.children and self._evict_host_nodes([node])
            if not whole:  # an inner node: a tombstone, and the components below it lose their data there
                self.drop(node, tier)
                self._cascade(node, tier)
            freed += len(held)
        return freed
