"""Components of the unified radix cache: per-node data with its own LRU and locks.

One tree, several kinds of per-node data. Each component owns:
- its pools (FullAttention: "kv" plus sidecar token pools that share the KV
  slot numbers, such as the indexer; Mamba: the "mamba" state pool;
  SlidingWindow, caches/unified/swa.py: the "swa" pool);
- a hit policy (ALL_PAGES: every page must be present; TRAILING_PAGES: only
  the data at the match end matters; TRAILING_WINDOW: only the window
  before the match end);
- its data per node, read and dropped through the component (`slots`,
  `state`, `drop`): FullAttention's slots are the tree's own
  (``node.value``/``node.host_value``: the tree is full attention's
  structure, as upstream's base component is), Mamba's the core's StateRef
  (``node_states(node)``, shared with the core's state paths), SlidingWindow's
  its own (in its ComponentData, a slot group of its own); its lock counts
  under ``node.ext["components"][name]``;
- its own LRU order (an OrderedDict keyed by node id, touched on insert and
  match) and its own lock counts per node;
- hooks the cache calls on insert, split, device eviction and host eviction,
  and a predicate saying whether a node is a usable match end for it;
- a priority for the cascade (caches/unified/hooks.py): full attention 2,
  sliding window 1, mamba 0; a component dropping its data from a node drops
  the lower ones' there too, since no match can end there without it.

Locks: ``lock(node)`` is a device pin (taken around load-back): a node any
component locks is neither device- nor host-evictable. ``pin_host(node)`` is
a host pin (taken by a prefetch on the node it extends): the node's host data
stays. FullAttention's data is a whole prefix, so its lock covers the node
and every ancestor (like the tree's lock_ref); Mamba's data sits at one node,
so its lock covers that node only.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Iterator, Protocol, Sequence

import torch

from caches.core.arguments import checked_count
from caches.core.copies import CopyTracker
from caches.core.slots import STATE_GROUP
from caches.core.state import StateRef, node_states
from caches.core.tree import RadixTree, TreeNode
from caches.errors import CacheError
from spec.fence import HitPolicy
from spec.trace import DEVICE, HOST

EXT_KEY = "components"


class ComponentLockError(CacheError, ValueError):
    """An unlock or unpin without a matching lock or pin."""


@dataclass
class ComponentData:
    """One component's bookkeeping on one node."""

    lock_ref: int = 0  # device pin (load-back)
    host_ref: int = 0  # host pin (a prefetch extends this node)


class Component(Protocol):
    name: str
    pools: tuple[str, ...]
    hit_policy: HitPolicy

    def data(self, node: TreeNode) -> ComponentData: ...
    def lock(self, node: TreeNode) -> None: ...
    def unlock(self, node: TreeNode) -> None: ...
    def pin_host(self, node: TreeNode) -> None: ...
    def unpin_host(self, node: TreeNode) -> None: ...
    def device_evictable(self, node: TreeNode) -> bool: ...
    def host_evictable(self, node: TreeNode) -> bool: ...
    def accepts_match_end(self, node: TreeNode) -> bool: ...
    def touch(self, node: TreeNode) -> None: ...
    def lru_order(self) -> list[int]: ...
    def on_insert(self, node: TreeNode) -> None: ...
    def on_split(self, head: TreeNode, tail: TreeNode) -> None: ...
    def on_device_evict(self, node: TreeNode, *, deleted: bool) -> None: ...
    def on_host_evict(self, node: TreeNode) -> None: ...
    def evict_host(self, count: int) -> int: ...


class ComponentBase:
    """LRU and lock bookkeeping shared by the built-in components."""

    name: str = ""
    pools: tuple[str, ...] = ()
    hit_policy: HitPolicy = HitPolicy.ALL_PAGES
    # True: a lock covers the node and its ancestors (data spans the prefix).
    lock_covers_prefix: bool = False
    data_class: type[ComponentData] = ComponentData
    priority: int = 0

    def __init__(self, tree: RadixTree) -> None:
        self._tree = tree
        self._lru: OrderedDict[int, TreeNode] = OrderedDict()

    # --- per-node data ------------------------------------------------------

    def data(self, node: TreeNode) -> ComponentData:
        per_node = node.ext.setdefault(EXT_KEY, {})
        found = per_node.get(self.name)
        if found is None:
            found = per_node[self.name] = self.data_class()
        return found

    def _peek(self, node: TreeNode) -> ComponentData | None:
        return node.ext.get(EXT_KEY, {}).get(self.name)

    # --- locks --------------------------------------------------------------

    def _locked_path(self, node: TreeNode) -> list[TreeNode]:
        if not self.lock_covers_prefix:
            return [node]
        path = []
        current: TreeNode | None = node
        while current is not None:
            path.append(current)
            current = current.parent
        return path

    def lock(self, node: TreeNode) -> None:
        for n in self._locked_path(node):
            self.data(n).lock_ref += 1

    def unlock(self, node: TreeNode) -> None:
        path = self._locked_path(node)
        for n in path:  # check first: a refused unlock changes nothing
            if self.data(n).lock_ref <= 0:
                raise ComponentLockError(f"{self.name}: unlock of node {node.id} would take the lock count of node {n.id} below zero")
        for n in path:
            self.data(n).lock_ref -= 1

    def pin_host(self, node: TreeNode) -> None:
        self.data(node).host_ref += 1

    def unpin_host(self, node: TreeNode) -> None:
        data = self.data(node)
        if data.host_ref <= 0:
            raise ComponentLockError(f"{self.name}: unpin_host of node {node.id} would take its host pin count below zero")
        data.host_ref -= 1

    def device_evictable(self, node: TreeNode) -> bool:
        data = self._peek(node)
        return data is None or data.lock_ref == 0

    def host_evictable(self, node: TreeNode) -> bool:
        data = self._peek(node)
        return data is None or (data.lock_ref == 0 and data.host_ref == 0)

    # --- LRU ----------------------------------------------------------------

    def holds_data(self, node: TreeNode) -> bool:
        """Whether this component has data on `node` (and so tracks it in its LRU)."""
        raise NotImplementedError

    def touch(self, node: TreeNode) -> None:
        if node is self._tree.root:
            return
        if self.holds_data(node):
            self._lru.pop(node.id, None)
            self._lru[node.id] = node
        else:
            self._lru.pop(node.id, None)

    def forget(self, node: TreeNode) -> None:
        self._lru.pop(node.id, None)

    def lru_order(self) -> list[int]:
        """Node ids, least recently used first."""
        return list(self._lru)

    def least_recent(self) -> Iterator[TreeNode]:
        yield from list(self._lru.values())

    def on_match(self, path: Sequence[TreeNode]) -> None:
        """A match or an insert ended at path[-1]: the path becomes recent."""
        for node in path:
            self.touch(node)

    def drop(self, node: TreeNode, tier: str) -> None:
        """Drop this component's data on `node` in `tier` (the cascade from a component above it)."""

    def accepts_anchor(self, node: TreeNode) -> bool:
        """A prefetch may hang pages below `node` and give them usable ends (default: any node)."""
        return True

    # --- hooks ----------------------------------------------------------------

    def on_insert(self, node: TreeNode) -> None:
        self.touch(node)

    def on_split(self, head: TreeNode, tail: TreeNode) -> None:
        raise NotImplementedError

    def on_device_evict(self, node: TreeNode, *, deleted: bool) -> None:
        if deleted or not self.holds_data(node):
            self.forget(node)

    def on_host_evict(self, node: TreeNode) -> None:
        self.forget(node)

    def accepts_match_end(self, node: TreeNode) -> bool:
        raise NotImplementedError

    def evict_host(self, count: int) -> int:
        raise NotImplementedError


class FullAttention(ComponentBase):
    """Full KV ("kv") plus sidecar token pools that reuse the KV slot numbers.

    Its slots are the tree's own ``value``/``host_value``, so its eviction is
    the tree's (by the tree's access ticks); its LRU mirrors recency of
    insert and match for callers that inspect it.
    """

    name = "full_attention"
    hit_policy = HitPolicy.ALL_PAGES
    lock_covers_prefix = True
    priority = 2

    def __init__(self, tree: RadixTree, evict_host: Callable[[int], int], sidecars: Sequence[str] = ()) -> None:
        super().__init__(tree)
        self._evict_host = evict_host  # the tree's host eviction, through the cache's eviction
        self.sidecars = tuple(sidecars)
        self.pools = ("kv", *self.sidecars)

    def slots(self, node: TreeNode, tier: str) -> torch.Tensor | None:
        """The node's KV slots on `tier` (the tree's own: full attention is the tree's structure)."""
        return node.value if tier == DEVICE else node.host_value

    def holds_data(self, node: TreeNode) -> bool:
        return node.value is not None or node.host_value is not None

    def accepts_match_end(self, node: TreeNode) -> bool:
        return True  # every page carries KV: any page boundary is usable

    def on_split(self, head: TreeNode, tail: TreeNode) -> None:
        data = self._peek(tail)
        if data is not None and data.lock_ref:
            # A lock through the tail also passes through its new parent.
            self.data(head).lock_ref = data.lock_ref
        # The host pin stays with the tail (the holder keeps the tail object).
        self.touch(head)
        self.touch(tail)

    def evict_host(self, count: int) -> int:
        """KV cannot be dropped apart from the tree's structure: host eviction is the tree's."""
        return self._evict_host(checked_count("count", count))


class Mamba(ComponentBase):
    """The recurrent state after a node's last page (TRAILING_PAGES).

    The slots live in the core's StateRef (``node_states(node)[pool]``); this
    component adds its LRU and locks, and may drop host states on its own,
    keeping the KV they followed.
    """

    name = "mamba"
    hit_policy = HitPolicy.TRAILING_PAGES
    lock_covers_prefix = False

    def __init__(self, tree: RadixTree, copies: CopyTracker, pool: str = "mamba") -> None:
        super().__init__(tree)
        self._copies = copies
        self.pool = pool
        self.pools = (pool,)

    def _ref(self, node: TreeNode) -> StateRef | None:
        return node_states(node).get(self.pool)

    def state(self, node: TreeNode) -> StateRef | None:
        """The state after the node's last page, on each tier (the core's StateRef, shared with its state paths)."""
        return self._ref(node)

    def drop(self, node: TreeNode, tier: str) -> None:
        """The window (or KV) it follows left this tier: the state there is of no use."""
        ref = self._ref(node)
        held = None if ref is None else (ref.device if tier == DEVICE else ref.host)
        if held is None or (tier == HOST and ref.host_ref):
            return  # none there, or a storage backup still reads it
        self._copies.free(tier, STATE_GROUP, [held], pools=[self.pool])
        if tier == DEVICE:
            ref.device = None
        else:
            ref.host = None
        if not self.holds_data(node):
            self.forget(node)

    def holds_data(self, node: TreeNode) -> bool:
        ref = self._ref(node)
        return ref is not None and (ref.device is not None or ref.host is not None)

    def accepts_match_end(self, node: TreeNode) -> bool:
        """A state must sit at the end, in the tier the end is served from.

        On the device the state must be on the device (nothing loads it
        otherwise); a host-only end needs a host state, which load-back
        copies with the KV.
        """
        if node is self._tree.root:
            return True  # nothing matched: the initial state
        ref = self._ref(node)
        if ref is None:
            return False
        if node.value is not None:
            return ref.device is not None
        return ref.host is not None

    def on_split(self, head: TreeNode, tail: TreeNode) -> None:
        # The state follows the last page, which the tail keeps: nothing moves.
        return None

    def _host_states(self) -> Iterator[tuple[TreeNode, StateRef]]:
        """This component's host states, least recently used first; a node found holding nothing is forgotten."""
        for node in self.least_recent():
            ref = self._ref(node)
            if ref is not None and ref.host is not None:
                yield node, ref
            elif not self.holds_data(node):
                self.forget(node)

    def evict_host(self, count: int) -> int:
        """Drop up to `count` host states, least recently used first; KV stays.

        Skips states this component locks or pins and states a storage backup
        still reads. The slot returns to its allocator once no copy touches it.
        """
        checked_count("count", count)
        dropped = 0
        for node, ref in self._host_states():
            if dropped >= count:
                break
            data = self._peek(node)
            if ref.host_ref or (data is not None and (data.lock_ref or data.host_ref)):
                continue
            self._copies.free(HOST, STATE_GROUP, [ref.host], pools=[self.pool])
            ref.host = None
            dropped += 1
            if not self.holds_data(node):
                self.forget(node)
        return dropped


def build_components(
    tree: RadixTree, copies: CopyTracker, token_pools: Sequence[str], extra_pools: Sequence[str], evict_host: Callable[[int], int]
) -> dict[str, ComponentBase]:
    """The components holding no data of their own: FullAttention always, Mamba when enabled.

    The sliding-window component needs the cache's slots and pools too:
    caches/unified_radix.py adds it (caches/unified/swa.py).
    """
    components: dict[str, ComponentBase] = {}
    full = FullAttention(tree, evict_host, [pool for pool in token_pools if pool != "kv"])
    components[full.name] = full
    if "mamba" in extra_pools:
        mamba = Mamba(tree, copies)
        components[mamba.name] = mamba
    return components
