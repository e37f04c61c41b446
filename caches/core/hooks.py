"""CacheHooks: everything one cache does differently from the shared core, in one object.

The core's paths (write, eviction, prefetch, commit, load-back) call these at
fixed points; the defaults are the plain hierarchical cache. A cache passes
its own hooks (caches/unified/hooks.py, caches/hi_mamba/state_lru.py): per-node
data with its own LRU and locks, a match that must end where that data is, a
pin on the node a prefetch extends. The decision (`can_terminate_prefetch`)
is not a hook: it is each cache's own code, in its own file.
"""

from __future__ import annotations

from typing import Mapping

from caches.core.state import StateRef
from caches.core.tree_node import MatchResult, TreeNode
from caches.core.windows import NoWindows, WindowOwner


class CacheHooks:
    # Window pools (caches/core/windows.py) by pool name, each with the component owning its per-node data.
    windows: Mapping[str, WindowOwner] = NoWindows

    # --- matching --------------------------------------------------------------

    def usable_match(self, full: MatchResult) -> MatchResult:
        """The tree's longest match, cut back to where this cache can serve it (and touched in its LRUs)."""
        return full

    # --- per-node data entering the tree --------------------------------------------

    def new_state_ref(self) -> StateRef:
        return StateRef()

    def on_insert(self, node: TreeNode, *, with_states: bool) -> None:
        """Device data of a write ended at `node` (with_states: it brought state pools' data)."""

    def on_prefetch_insert(self, node: TreeNode) -> None:
        """A prefetch commit added host data ending at `node`."""

    def on_state_attached(self, node: TreeNode, pool: str) -> None:
        """A prefetched state was attached to `node`."""

    def on_split(self, head: TreeNode, tail: TreeNode) -> None:
        """The tree split a node: `tail` is the original object, `head` its new parent."""

    # --- eviction ---------------------------------------------------------------------

    def device_evictable(self, node: TreeNode) -> bool:
        return True

    def host_evictable(self, node: TreeNode) -> bool:
        return True

    def on_device_evict(self, node: TreeNode, *, deleted: bool) -> None:
        """`node` lost its device data (deleted: it leaves the tree)."""

    def on_host_evict(self, node: TreeNode) -> None:
        """`node` lost its host data and leaves the tree."""

    def make_device_room(self, group: str, short: int) -> int:
        """Free device slots of `group` by this cache's own means first; returns what is still short.

        The core then evicts whole device nodes (least recently used) for the rest.
        """
        return short

    def make_host_room(self, group: str, short: int) -> int:
        """Free host slots of `group` by this cache's own means first; returns what is still short.

        The core then evicts whole host nodes for the rest (0: nothing more).
        """
        return short

    # --- prefetch and load-back ----------------------------------------------------

    def prefetch_anchor(self, match: MatchResult) -> TreeNode:
        """The node a prefetch of the matched tokens hangs its pages below (backed up, the root counts)."""
        return match.deepest_backed_up_node

    def pin_prefetch_anchor(self, request_id: str, anchor: TreeNode) -> None:
        """A prefetch will hang its pages below `anchor`: keep this cache's data there (before room is made)."""

    def unpin_prefetch_anchor(self, request_id: str, anchor: TreeNode) -> None:
        """Undo pin_prefetch_anchor (the prefetch was not queued, or it ended)."""

    def lock(self, node: TreeNode) -> None:
        """Keep this cache's data on the path to `node` while the core makes room (load-back)."""

    def unlock(self, node: TreeNode) -> None:
        """Undo lock."""
