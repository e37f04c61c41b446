"""hi_mamba_radix's hooks: one mamba state per node, with its own host pin and LRU.

A state belongs to one prefix length: the state after a node's last page. So a
cached prefix is usable only up to the deepest matched node that carries a
state (on the device for a device hit, on the host for a host hit); nodes
without one may sit in the middle of the path.

Host states have their own pin (StateRef.host_ref: a storage backup, or a
prefetch hanging below the node) and their own LRU (StateRef.last_access,
logical ticks), so host state slots can be reclaimed without evicting KV
(`evict_host_states`).
"""

from __future__ import annotations

from collections.abc import Iterator

from caches.core.copies import CopyTracker
from caches.core.hooks import CacheHooks
from caches.core.slots import KV_GROUP, STATE_GROUP
from caches.core.state import StateRef, node_states
from caches.core.tree import MatchResult, RadixTree, TreeNode
from spec.trace import HOST

MAMBA = "mamba"


class MambaStateHooks(CacheHooks):
    def __init__(self, tree: RadixTree, copies: CopyTracker) -> None:
        self.tree = tree
        self.copies = copies
        self._tick = 0
        # request id -> the anchor's state refs its prefetch pinned on the host
        self._prefetch_pins: dict[str, list[StateRef]] = {}

    # --- matching: usable only up to a node that carries the state ----------------

    def usable_match(self, full: MatchResult) -> MatchResult:
        """The core match, cut back to the deepest node whose state is where the hit needs it.

        Host part: the deepest host-only node with a host state ends the match
        (the device part before it is kept whole, load_back brings the state).
        Otherwise the deepest device node with a device state ends it.
        """
        path = self.tree.path_to(full.host_node)
        end = None
        for node in reversed(path):
            ref = node_states(node).get(MAMBA)
            if ref is None:
                continue
            on_device = node.value is not None
            if (on_device and ref.device is not None) or (not on_device and ref.host is not None):
                end = node
                break
        if end is None:
            end = self.tree.root
        self._touch_path(end)
        if end is full.host_node:
            return full
        depth = self.tree.depth(end)
        if end.value is not None:  # the usable end is on the device: no host hit left
            return MatchResult(
                device_slots=full.device_slots[:depth], device_node=end, host_node=end, host_hit_tokens=0,
                matched_tokens=depth, deepest_backed_up_node=full.deepest_backed_up_node,
            )
        device_tokens = full.device_hit_tokens
        return MatchResult(
            device_slots=full.device_slots, device_node=full.device_node, host_node=end,
            host_hit_tokens=depth - device_tokens, matched_tokens=depth,
            deepest_backed_up_node=full.deepest_backed_up_node,
        )

    # --- the state LRU: logical ticks, deeper states older than their ancestors -----

    def _next_tick(self) -> int:
        self._tick += 1
        return self._tick

    def _touch_path(self, end: TreeNode) -> None:
        # The end first, then each ancestor one tick later: on one path, the
        # deepest state is the least recently used, as with leaf-first eviction.
        node = end
        while node is not None:
            ref = node_states(node).get(MAMBA)
            if ref is not None:
                ref.last_access = self._next_tick()
            node = node.parent

    def new_state_ref(self) -> StateRef:
        return StateRef(last_access=self._next_tick())

    def on_insert(self, node: TreeNode, *, with_states: bool) -> None:
        if with_states:
            ref = node_states(node).get(MAMBA)
            if ref is not None:
                ref.last_access = self._next_tick()

    def on_state_attached(self, node: TreeNode, pool: str) -> None:
        # The core attaches only a state loaded for exactly the committed length (F4).
        node_states(node)[pool].last_access = self._next_tick()

    # --- host state eviction ----------------------------------------------------------

    def evict_host_states(self, num_states: int) -> int:
        """Free up to `num_states` host mamba states, least recently used first; KV stays.

        Skips pinned states (a storage backup or a prefetch below the node) and
        nodes whose host data a copy is reading. A node that loses its host state
        keeps its host KV pages but no longer ends a usable host match.
        Returns the states freed.
        """
        candidates = []
        for node, ref in self._host_states():
            if ref.host_ref > 0:
                continue  # pinned: a storage backup reads it, or a prefetch hangs below the node
            if self._host_copy_pending(node, ref):
                continue
            candidates.append((ref.last_access, node.id, ref))
        candidates.sort(key=lambda c: (c[0], c[1]))
        freed = 0
        for _, _, ref in candidates[:num_states]:
            self.copies.free(HOST, STATE_GROUP, [ref.host], pools=[MAMBA])
            ref.host = None
            freed += 1
        return freed

    def _host_states(self) -> Iterator[tuple[TreeNode, StateRef]]:
        """Every node that carries a host state, with it."""
        for node in self.tree.iter_nodes():
            ref = node_states(node).get(MAMBA)
            if ref is not None and ref.host is not None:
                yield node, ref

    def _host_copy_pending(self, node: TreeNode, ref: StateRef) -> bool:
        kv_busy = node.host_value is not None and self.copies.busy(HOST, KV_GROUP, node.host_value.tolist())
        return kv_busy or self.copies.busy(HOST, STATE_GROUP, [ref.host])

    def make_host_room(self, group: str, short: int) -> int:
        if group == STATE_GROUP:
            # A state slot is won back from the state LRU, never by evicting host KV.
            self.evict_host_states(short)
            return 0
        return short

    # --- prefetch: the anchor's host state stays while a prefetch hangs below it ------

    def pin_prefetch_anchor(self, request_id: str, anchor: TreeNode) -> None:
        # Should the new leaf's state not arrive, the anchor's state is the
        # fallback end of a usable match: pinned from before the prefetch's own
        # state slot is taken (that allocation may evict host states).
        pinned = [ref for ref in node_states(anchor).values() if ref.host is not None]
        for ref in pinned:
            ref.host_ref += 1
        self._prefetch_pins[request_id] = pinned

    def unpin_prefetch_anchor(self, request_id: str, anchor: TreeNode) -> None:
        for ref in self._prefetch_pins.pop(request_id, []):
            ref.host_ref -= 1
