"""Paged radix tree keyed by token ids: the prefix index every cache builds on.

Edges hold whole pages of tokens (``page_size`` tokens per page); matches and splits
are page-aligned, and a partial trailing page never matches. A node carries its
device slots (``value``, None once evicted from the device), its host slots
(``host_value``, None until backed up) and one chained hash per page.

Structural invariants (checked by :meth:`RadixTree.check_invariants`):

* device-resident nodes form a subtree containing the root (a node holding device
  slots has a parent holding device slots), so eviction can work leaf-first;
* backed-up nodes form a subtree containing the root;
* an evicted node is backed up (a node with neither copy is deleted instead);
* ``lock_ref`` (device pin) is propagated to the root: a parent's count is at least
  each child's.

Change a node's tiers through the tree (insert, insert_host, evict, evict_host,
set_device_value, set_host_value, clear_host_value), never by assigning ``value`` or
``host_value`` directly: the tree keeps token counters that check_invariants audits.

The tree is NOT thread-safe, by design: only the scheduler thread touches it.
Background IO threads report through operations that the scheduler applies.
Last-access times are logical ticks from a counter in the tree (never wall time),
so eviction order is deterministic; ties break by node id (older first).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator, Sequence

import torch

from caches.core.hashing import page_hashes
from caches.core.tree_checks import check_tree
from caches.core.tree_node import (  # the node types stay importable from here
    InsertResult, MatchResult, NodeCallback, NodePredicate, Slots, SplitCallback, Tokens, TreeInvariantError, TreeNode,
    TreeUsageError, as_slots, as_tokens, check_aligned, checked_hashes, concat_slots, non_negative_int,
)
from spec.errors import bounded_repr

__all__ = ["InsertResult", "MatchResult", "RadixTree", "TreeInvariantError", "TreeNode", "TreeUsageError"]


class RadixTree:
    """Paged radix tree over token ids; see the module docstring for its invariants.

    ``on_split(new_parent, child)`` runs after every split so a cache can divide its
    own ``ext`` data (``child`` is the original node object, now holding the tail).
    ``device`` is where device slot tensors live; host slot tensors stay on the CPU.
    """

    def __init__(
        self,
        page_size: int,
        *,
        on_split: SplitCallback | None = None,
        device: torch.device | str = "cpu",
    ) -> None:
        if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size <= 0:
            raise TreeUsageError(f"page_size is {bounded_repr(page_size)}: expected a positive int")
        self.page_size = page_size
        self.device = torch.device(device)
        self._on_split = on_split
        self._next_id = itertools.count()
        self._clock = 0
        self._node_count = 0
        self._device_tokens = 0
        self._host_tokens = 0
        self.root = TreeNode(next(self._next_id), (), None)
        # Empty but present: the root is never evicted and counts as backed up.
        self.root.value = torch.empty(0, dtype=torch.int64, device=self.device)
        self.root.host_value = torch.empty(0, dtype=torch.int64)

    # -- accounting ----------------------------------------------------------

    def node_count(self) -> int:
        """Nodes other than the root."""
        return self._node_count

    def device_tokens(self) -> int:
        """Tokens whose device slots the tree holds."""
        return self._device_tokens

    def host_tokens(self) -> int:
        """Tokens whose host slots the tree holds."""
        return self._host_tokens

    def iter_nodes(self, *, include_root: bool = False) -> Iterator[TreeNode]:
        """Depth-first, parents before children, in insertion order.

        Do not add or remove nodes while iterating (collect first).
        """
        stack = [self.root]
        while stack:
            node = stack.pop()
            if node is not self.root or include_root:
                yield node
            stack.extend(reversed(node.children.values()))

    def path_to(self, node: TreeNode) -> list[TreeNode]:
        """Nodes from just below the root down to ``node`` (empty for the root)."""
        path = []
        while node is not self.root:
            path.append(node)
            node = node.parent
        path.reverse()
        return path

    @staticmethod
    def depth(node: TreeNode) -> int:
        """Tokens from the root to the end of ``node``."""
        tokens = 0
        while node.parent is not None:
            tokens += len(node.key)
            node = node.parent
        return tokens

    # -- lookup --------------------------------------------------------------

    def match_prefix(self, tokens: Tokens) -> MatchResult:
        """Longest page-aligned prefix of ``tokens`` in the tree.

        Splits a node when the match ends inside it, so the returned nodes end exactly
        at the matched lengths. Touches the last-access tick of the matched path.
        """
        key = as_tokens(tokens)
        page_size = self.page_size
        end = len(key) - len(key) % page_size
        tick = self._tick()
        node = device_node = backed_up_node = self.root
        node.last_access = tick
        device_values: list[torch.Tensor] = []
        device_tokens = host_hit_tokens = 0
        pos = 0
        while pos < end:
            child = node.children.get(key[pos : pos + page_size])
            if child is None:
                break
            key_len = len(child.key)
            if key[pos : pos + key_len] != child.key:
                key_len = self._matched_len(child.key, key, pos)
                child = self._split(child, key_len)
            value = child.value
            if value is not None:
                if device_node is not node:
                    break  # resident below evicted: unreachable while invariants hold
                device_values.append(value)
                device_node = child
                device_tokens += key_len
            elif child.host_value is not None:
                host_hit_tokens += key_len
            else:
                break  # neither copy: unreachable while invariants hold; never a hit
            child.last_access = tick
            if backed_up_node is node and child.host_value is not None:
                backed_up_node = child
            node = child
            pos += key_len
        if not device_values:
            device_slots = torch.empty(0, dtype=torch.int64, device=self.device)
        elif len(device_values) == 1:
            device_slots = device_values[0]  # no copy when one node covers the hit
        else:
            device_slots = torch.cat(device_values)
        return MatchResult(
            device_slots=device_slots,
            device_node=device_node,
            host_node=node,
            host_hit_tokens=host_hit_tokens,
            matched_tokens=device_tokens + host_hit_tokens,
            deepest_backed_up_node=backed_up_node,
        )

    # -- insertion -----------------------------------------------------------

    def insert(
        self,
        tokens: Tokens,
        device_slots: Slots,
        *,
        hashes: Sequence[str] | None = None,
    ) -> InsertResult:
        """Insert ``tokens`` (a multiple of page_size) with their device slots.

        Slots for a part already on the device come back in ``duplicate_slots`` (the
        caller frees them); a present but evicted node takes the new slots.
        Hashes are computed, chained from the parent, when not given.
        """
        key = as_tokens(tokens)
        check_aligned(key, self.page_size)
        slots = as_slots("device_slots", device_slots, len(key), self.device)
        if hashes is not None:
            hashes = checked_hashes(hashes, len(key), self.page_size)
        tick = self._tick()
        node, steps = self._walk_splitting(self.root, key, tick)
        pos = sum(matched for _, matched in steps)
        new_hashes: list[str] = []
        if pos < len(key):
            # Before any slot changes hands: a bad token id must leave the tree intact.
            if hashes is None:
                new_hashes = page_hashes(key[pos:], self.page_size, prev=node.last_hash)
            else:
                new_hashes = hashes[pos // self.page_size :]
        result = InsertResult(prefix_len=0, duplicate_slots=slots[:0], node=node)
        self._device_tokens += self._fill_walked(steps, slots, "value", result)
        if pos < len(key):
            new_node = self._add_child(node, key[pos:], new_hashes, tick)
            new_node.value = slots[pos:].clone()
            self._device_tokens += len(new_node.key)
            result.node = result.new_node = new_node
        return result

    def insert_host(
        self,
        parent_node: TreeNode,
        tokens: Tokens,
        host_slots: Slots,
        hashes: Sequence[str],
    ) -> InsertResult:
        """Attach host-only data for ``tokens`` below ``parent_node`` (a prefetch commit).

        ``parent_node`` must be backed up (the root counts). Host slots for a part
        already backed up come back in ``duplicate_slots``; a device-only node on the
        way adopts its part as its backup. The rest becomes one evicted, backed-up node.
        """
        self._check_in_tree(parent_node, "parent_node")
        if parent_node.host_value is None:
            raise TreeUsageError(
                f"parent_node {parent_node!r} is not backed up: host-only nodes must "
                "hang below a backed-up node (or the root)"
            )
        key = as_tokens(tokens)
        check_aligned(key, self.page_size)
        slots = as_slots("host_slots", host_slots, len(key), torch.device("cpu"))
        hashes = checked_hashes(hashes, len(key), self.page_size)
        tick = self._tick()
        node, steps = self._walk_splitting(parent_node, key, tick)
        result = InsertResult(prefix_len=0, duplicate_slots=slots[:0], node=node)
        self._host_tokens += self._fill_walked(steps, slots, "host_value", result)
        pos = sum(matched for _, matched in steps)
        if pos < len(key):
            new_node = self._add_child(
                node, key[pos:], hashes[pos // self.page_size :], tick
            )
            new_node.host_value = slots[pos:].clone()
            self._host_tokens += len(new_node.key)
            result.node = result.new_node = new_node
        return result

    def _fill_walked(self, steps: list[tuple[TreeNode, int]], slots: torch.Tensor, attr: str, result: InsertResult) -> int:
        """Give each walked node that lacks ``attr`` its part of ``slots``; the rest are duplicates.

        Returns the tokens newly held; records restored/existing nodes and duplicates on ``result``.
        """
        duplicates: list[torch.Tensor] = []
        pos = added = 0
        for step_node, matched in steps:
            part = slots[pos : pos + matched]
            if getattr(step_node, attr) is None:
                setattr(step_node, attr, part.clone())
                added += matched
                result.restored_nodes.append(step_node)
            else:
                duplicates.append(part)
                result.prefix_len += matched
                result.existing_nodes.append(step_node)
            pos += matched
        result.duplicate_slots = concat_slots(duplicates, slots[:0])
        return added

    def split(self, node: TreeNode, at: int) -> TreeNode:
        """Split ``node`` after ``at`` tokens; returns the new parent (the head part).

        ``node`` keeps the tail and its identity (children, host pin, ext unless the
        on_split callback moves it).
        """
        self._check_in_tree(node, "node")
        if node is self.root:
            raise TreeUsageError("node is the root: the root cannot be split")
        if (
            isinstance(at, bool)
            or not isinstance(at, int)
            or at % self.page_size
            or not 0 < at < len(node.key)
        ):
            raise TreeUsageError(
                f"at is {bounded_repr(at)}: expected a multiple of page_size {self.page_size} "
                f"strictly between 0 and the node's {len(node.key)} tokens"
            )
        return self._split(node, at)

    # -- explicit tier changes (the load-back and backup paths of a cache) ------

    def set_device_value(self, node: TreeNode, device_slots: Slots) -> None:
        """Give an evicted node device slots again (its parent must be on the device)."""
        self._check_in_tree(node, "node")
        if node is self.root or node.value is not None:
            raise TreeUsageError(f"node {node!r} is not an evicted node")
        if node.parent.value is None:
            raise TreeUsageError(
                f"node {node!r} has an evicted parent: load ancestors onto the device first"
            )
        slots = as_slots("device_slots", device_slots, len(node.key), self.device)
        node.value = slots.clone()
        self._device_tokens += len(node.key)

    def set_host_value(self, node: TreeNode, host_slots: Slots) -> None:
        """Record a node's host backup (its parent must already be backed up)."""
        self._check_in_tree(node, "node")
        if node is self.root or node.host_value is not None:
            raise TreeUsageError(f"node {node!r} is the root or already backed up")
        if node.parent.host_value is None:
            raise TreeUsageError(
                f"node {node!r} has a parent without backup: back up ancestors first"
            )
        slots = as_slots("host_slots", host_slots, len(node.key), torch.device("cpu"))
        node.host_value = slots.clone()
        self._host_tokens += len(node.key)

    def clear_host_value(self, node: TreeNode) -> torch.Tensor:
        """Drop a device-resident node's backup; returns its host slots for the caller to free."""
        self._check_in_tree(node, "node")
        if node is self.root or node.host_value is None or node.value is None:
            raise TreeUsageError(
                f"node {node!r}: only a backed-up node still on the device can drop its backup"
            )
        if node.host_ref:
            raise TreeUsageError(f"node {node!r} is host-pinned")
        if any(child.host_value is not None for child in node.children.values()):
            raise TreeUsageError(f"node {node!r} has backed-up children")
        host_slots, node.host_value = node.host_value, None
        self._host_tokens -= len(node.key)
        return host_slots

    # -- pins ----------------------------------------------------------------

    def lock(self, node: TreeNode) -> None:
        """Device pin: lock_ref + 1 on ``node`` and every ancestor up to the root."""
        self._check_in_tree(node, "node")
        current: TreeNode | None = node
        while current is not None:
            current.lock_ref += 1
            current = current.parent

    def unlock(self, node: TreeNode) -> None:
        """Undo one :meth:`lock`; refuses (changing nothing) when a count would go negative."""
        self._check_in_tree(node, "node")
        current: TreeNode | None = node
        while current is not None:
            if current.lock_ref <= 0:
                raise TreeUsageError(
                    f"unlock of {node!r} would take lock_ref of node {current.id} below zero"
                )
            current = current.parent
        current = node
        while current is not None:
            current.lock_ref -= 1
            current = current.parent

    def pin_host(self, node: TreeNode) -> None:
        """Host pin on this node only: its host data stays while pinned.

        Ancestors need no pin: host eviction takes childless nodes only.
        """
        self._check_in_tree(node, "node")
        if node.host_value is None:
            raise TreeUsageError(f"node {node!r} has no host data to pin")
        node.host_ref += 1

    def unpin_host(self, node: TreeNode) -> None:
        """Undo one :meth:`pin_host`; refuses when host_ref would go negative."""
        self._check_in_tree(node, "node")
        if node.host_ref <= 0:
            raise TreeUsageError(f"unpin_host of {node!r}: host_ref would go below zero")
        node.host_ref -= 1

    # -- eviction ------------------------------------------------------------

    def evict(
        self,
        num_tokens: int,
        *,
        on_demote: NodeCallback,
        on_delete: NodeCallback,
        can_evict: NodePredicate | None = None,
    ) -> int:
        """Free at least ``num_tokens`` device tokens if possible; returns tokens evicted.

        Least recently used first, over unlocked device-resident nodes with no
        device-resident child. A backed-up node is demoted (``on_demote(node)`` frees
        its device slots, then value becomes None); any other node is deleted
        (``on_delete(node)`` frees them, then it leaves the tree). Callbacks run before
        the tree changes, with the node intact.
        """
        non_negative_int("num_tokens", num_tokens)
        root = self.root

        def evictable(node: TreeNode) -> bool:
            return (
                node is not root
                and node.value is not None
                and node.lock_ref == 0
                and all(child.value is None for child in node.children.values())
                and (can_evict is None or can_evict(node))
            )

        def take(node: TreeNode) -> None:
            if node.host_value is not None:
                on_demote(node)
                node.value = None
            else:
                if node.children:
                    raise TreeInvariantError(
                        f"node {node.id} has children but no backup: cannot delete it"
                    )
                on_delete(node)
                self._detach(node)
            self._device_tokens -= len(node.key)

        return self._evict_lru(num_tokens, evictable, take)

    def evict_host(
        self,
        num_tokens: int,
        *,
        on_delete: NodeCallback,
        can_evict: NodePredicate | None = None,
    ) -> int:
        """Delete host-only leaves, least recently used first; returns tokens evicted.

        Candidates are evicted from the device, backed up, childless, unpinned (host
        and device). ``on_delete(node)`` frees the host slots before the node leaves.
        """
        non_negative_int("num_tokens", num_tokens)
        root = self.root

        def evictable(node: TreeNode) -> bool:
            return (
                node is not root
                and node.value is None
                and node.host_value is not None
                and node.host_ref == 0
                and node.lock_ref == 0
                and not node.children
                and (can_evict is None or can_evict(node))
            )

        def take(node: TreeNode) -> None:
            on_delete(node)
            self._detach(node)
            self._host_tokens -= len(node.key)

        return self._evict_lru(num_tokens, evictable, take)

    def _evict_lru(self, num_tokens: int, evictable: NodePredicate, take: NodeCallback) -> int:
        """Take evictable nodes, least recently used first, until num_tokens are gone.

        A parent becomes a candidate once taking its last child makes it evictable.
        """
        heap = [(node.last_access, node.id, node) for node in self.iter_nodes() if evictable(node)]
        heapq.heapify(heap)
        evicted = 0
        while evicted < num_tokens and heap:
            _, _, node = heapq.heappop(heap)
            parent = node.parent
            take(node)
            evicted += len(node.key)
            if evictable(parent):
                heapq.heappush(heap, (parent.last_access, parent.id, parent))
        return evicted

    def check_invariants(self, *, verify_hashes: bool = False) -> None:
        """Raise TreeInvariantError on the first inconsistency (caches/core/tree_checks.py).

        ``verify_hashes`` also recomputes every page hash from the tokens (slow).
        """
        check_tree(self, verify_hashes=verify_hashes)

    # -- internals -----------------------------------------------------------

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def _matched_len(self, node_key: tuple[int, ...], key: tuple[int, ...], pos: int) -> int:
        """Tokens of ``node_key`` matching ``key`` from ``pos``, in whole pages.

        The caller already matched the first page (it found the child under it).
        """
        page_size = self.page_size
        matched = page_size
        limit = min(len(node_key), len(key) - pos)
        while (
            matched + page_size <= limit
            and node_key[matched : matched + page_size]
            == key[pos + matched : pos + matched + page_size]
        ):
            matched += page_size
        return matched

    def _walk_splitting(
        self, start: TreeNode, key: tuple[int, ...], tick: int
    ) -> tuple[TreeNode, list[tuple[TreeNode, int]]]:
        """Follow ``key`` from ``start``, splitting where the match ends mid-node.

        Returns the last node reached and each (node, tokens) step. Splits change no
        data, so an error after this leaves the tree equivalent.
        """
        page_size = self.page_size
        node = start
        node.last_access = tick
        steps: list[tuple[TreeNode, int]] = []
        pos = 0
        while pos < len(key):
            child = node.children.get(key[pos : pos + page_size])
            if child is None:
                break
            matched = len(child.key)
            if key[pos : pos + matched] != child.key:
                matched = self._matched_len(child.key, key, pos)
                child = self._split(child, matched)
            child.last_access = tick
            steps.append((child, matched))
            node = child
            pos += matched
        return node, steps

    def _split(self, child: TreeNode, at: int) -> TreeNode:
        page_size = self.page_size
        parent = child.parent
        head = TreeNode(next(self._next_id), child.key[:at], parent)
        head.children[child.key[at : at + page_size]] = child
        if child.value is not None:
            head.value = child.value[:at].clone()
            child.value = child.value[at:].clone()
        if child.host_value is not None:
            head.host_value = child.host_value[:at].clone()
            child.host_value = child.host_value[at:].clone()
        pages = at // page_size
        head.hash_value = child.hash_value[:pages]
        child.hash_value = child.hash_value[pages:]
        # Every lock through the child also passes through the head.
        head.lock_ref = child.lock_ref
        # The host pin stays with the tail: the head cannot be host-evicted while it
        # has a child, and the pin holder keeps a reference to the tail object.
        head.hit_count = child.hit_count
        head.last_access = child.last_access
        parent.children[head.key[:page_size]] = head
        child.key = child.key[at:]
        child.parent = head
        self._node_count += 1
        if self._on_split is not None:
            self._on_split(head, child)
        return head

    def _add_child(
        self, parent: TreeNode, key: tuple[int, ...], hashes: list[str], tick: int
    ) -> TreeNode:
        node = TreeNode(next(self._next_id), key, parent)
        node.hash_value = list(hashes)
        node.last_access = tick
        parent.children[key[: self.page_size]] = node
        self._node_count += 1
        return node

    def _detach(self, node: TreeNode) -> None:
        parent = node.parent
        del parent.children[node.key[: self.page_size]]
        node.parent = None
        self._node_count -= 1

    def contains(self, node: object) -> bool:
        """Whether ``node`` is this tree's root or a node still attached below it."""
        if not isinstance(node, TreeNode):
            return False
        current = node
        while current.parent is not None:
            if current.parent.children.get(current.key[: self.page_size]) is not current:
                break
            current = current.parent
        return current is self.root

    def _check_in_tree(self, node: TreeNode, field_name: str) -> None:
        if not isinstance(node, TreeNode):
            raise TreeUsageError(f"{field_name} is {bounded_repr(node)}: expected a TreeNode")
        if not self.contains(node):
            raise TreeUsageError(f"{field_name} {bounded_repr(node)} is not in this tree (deleted?)")
