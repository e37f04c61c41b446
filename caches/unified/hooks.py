"""The unified cache's hooks: every core path consults each component (caches/unified/components.py).

- a match ends at the deepest node every component accepts as a match end,
  and touches each component's LRU on the way;
- data entering the tree (a write, a prefetch commit) and splits reach every
  component;
- a node leaves a tier only if every component lets it, and each component
  learns what left (full attention leaving takes every component's data with
  it); a component dropping its own data from a node drops the data of
  components of lower priority there too (the cascade: a window gone takes
  the state at its end);
- room in a component's slot group is won from its own LRU first, keeping
  KV: host states from Mamba's, window slots from the sliding window's;
- a prefetch hangs its pages below the deepest backed-up node every
  component accepts (a sliding window needs the window before it), pins
  every component's data on it; load-back locks every component's data on
  the path (the window, for the sliding window) while room is made.
"""

from __future__ import annotations

from caches.core.hooks import CacheHooks
from caches.core.slots import STATE_GROUP
from caches.core.tree import MatchResult, RadixTree, TreeNode
from caches.core.windows import WindowOwner
from caches.unified.components import ComponentBase
from spec.fence import HitPolicy


class UnifiedHooks(CacheHooks):
    def __init__(self, tree: RadixTree, components: dict[str, ComponentBase]) -> None:
        self.tree = tree
        self.components = components
        self.windows: dict[str, WindowOwner] = {
            pool: c for c in components.values() if c.hit_policy is HitPolicy.TRAILING_WINDOW for pool in c.pools  # type: ignore[misc]
        }

    def cascade(self, node: TreeNode, tier: str, source: ComponentBase) -> None:
        """`source` dropped its data from `node` on `tier`: so do the components below it."""
        for component in self._each():
            if component.priority < source.priority:
                component.drop(node, tier)

    def _each(self) -> list[ComponentBase]:
        return list(self.components.values())

    # --- matching: the deepest end every component accepts -----------------------------

    def usable_match(self, full: MatchResult) -> MatchResult:
        path = self.tree.path_to(full.host_node)
        end_index = len(path)
        while end_index and not all(c.accepts_match_end(path[end_index - 1]) for c in self._each()):
            end_index -= 1
        kept = path[:end_index]
        for component in self._each():
            component.on_match(kept)
        if end_index == len(path):
            return full
        return self._truncated(full, kept)

    def _truncated(self, full: MatchResult, kept: list[TreeNode]) -> MatchResult:
        end = kept[-1] if kept else self.tree.root
        end_tokens = sum(len(node.key) for node in kept)
        backed_up = self.tree.root
        for node in kept:
            if node.host_value is None:
                break
            backed_up = node
        if end.value is not None:  # served from the device: no host part
            return MatchResult(
                device_slots=full.device_slots[:end_tokens], device_node=end, host_node=end,
                host_hit_tokens=0, matched_tokens=end_tokens, deepest_backed_up_node=backed_up,
            )
        # Host-only end: the device part is unchanged (device nodes form a
        # prefix, so it lies above the end); load_back(host_node) brings the rest.
        return MatchResult(
            device_slots=full.device_slots, device_node=full.device_node, host_node=end,
            host_hit_tokens=end_tokens - len(full.device_slots), matched_tokens=end_tokens,
            deepest_backed_up_node=backed_up,
        )

    # --- data entering the tree ------------------------------------------------------------

    def _inserted(self, node: TreeNode) -> None:
        path = self.tree.path_to(node)
        for component in self._each():
            component.on_match(path)

    def on_insert(self, node: TreeNode, *, with_states: bool) -> None:
        self._inserted(node)

    def on_prefetch_insert(self, node: TreeNode) -> None:
        self._inserted(node)

    def on_split(self, head: TreeNode, tail: TreeNode) -> None:
        for component in self._each():
            component.on_split(head, tail)

    # --- eviction --------------------------------------------------------------------------

    def device_evictable(self, node: TreeNode) -> bool:
        return all(c.device_evictable(node) for c in self._each())

    def host_evictable(self, node: TreeNode) -> bool:
        return all(c.host_evictable(node) for c in self._each())

    def on_device_evict(self, node: TreeNode, *, deleted: bool) -> None:
        for component in self._each():
            component.on_device_evict(node, deleted=deleted)

    def on_host_evict(self, node: TreeNode) -> None:
        for component in self._each():
            component.on_host_evict(node)

    def make_device_room(self, group: str, short: int) -> int:
        # Room for window slots: the window's own LRU (inner nodes keep their KV).
        if group in self.windows:
            short -= self.windows[group].evict_device(short)  # type: ignore[attr-defined]
        return max(short, 0)

    def make_host_room(self, group: str, short: int) -> int:
        # Room for a host state or window: drop the least recently used ones first,
        # keeping KV; only then take whole nodes.
        if group == STATE_GROUP and "mamba" in self.components:
            short -= self.components["mamba"].evict_host(short)
        elif group in self.windows:
            short -= self.windows[group].evict_host(short)  # type: ignore[attr-defined]
        return max(short, 0)

    # --- prefetch and load-back ---------------------------------------------------------------

    def prefetch_anchor(self, match: MatchResult) -> TreeNode:
        """The deepest backed-up node every component accepts: its new pages can then end a match."""
        path = self.tree.path_to(match.deepest_backed_up_node)
        while path and not all(c.accepts_anchor(path[-1]) for c in self._each()):
            path.pop()
        return path[-1] if path else self.tree.root

    def pin_prefetch_anchor(self, request_id: str, anchor: TreeNode) -> None:
        for component in self._each():
            component.pin_host(anchor)

    def unpin_prefetch_anchor(self, request_id: str, anchor: TreeNode) -> None:
        for component in self._each():
            component.unpin_host(anchor)

    def lock(self, node: TreeNode) -> None:
        for component in self._each():
            component.lock(node)

    def unlock(self, node: TreeNode) -> None:
        for component in self._each():
            component.unlock(node)
