"""The radix tree's structural invariants, checked from the outside (tests, debugging).

See caches/core/tree.py for what they are. Reads only the tree's public
surface, so it needs nothing but the node types.
"""

from __future__ import annotations

from typing import Iterator, Protocol

import torch

from caches.core.hashing import page_hashes
from caches.core.tree_node import TreeInvariantError, TreeNode


class TreeLike(Protocol):
    root: TreeNode
    page_size: int

    def iter_nodes(self) -> Iterator[TreeNode]: ...
    def node_count(self) -> int: ...
    def device_tokens(self) -> int: ...
    def host_tokens(self) -> int: ...


def check_tree(tree: "TreeLike", *, verify_hashes: bool = False) -> None:
    """Raise TreeInvariantError on the first inconsistency found.

    ``verify_hashes`` also recomputes every page hash from the tokens (slow).
    """
    root = tree.root
    page_size = tree.page_size

    def fail(node: TreeNode, why: str) -> None:
        raise TreeInvariantError(f"node {node.id}: {why}")

    if root.key != () or root.parent is not None:
        fail(root, "the root must have an empty key and no parent")
    if root.value is None or root.host_value is None:
        fail(root, "the root must be neither evicted nor without backup")
    seen_ids = {root.id}
    node_count = device_tokens = host_tokens = 0
    for node in tree.iter_nodes():
        parent = node.parent
        key_len = len(node.key)
        if parent is None or parent.children.get(node.key[:page_size]) is not node:
            fail(node, "not reachable from its parent under its first page")
        if node.id in seen_ids:
            fail(node, "id used twice")
        seen_ids.add(node.id)
        if not isinstance(node.key, tuple) or key_len == 0 or key_len % page_size:
            fail(node, f"key of {key_len} tokens is not a non-empty multiple of {page_size}")
        for name, slots in (("value", node.value), ("host_value", node.host_value)):
            if slots is not None and (
                slots.dim() != 1 or slots.dtype != torch.int64 or len(slots) != key_len
            ):
                fail(
                    node,
                    f"{name} has shape {tuple(slots.shape)} and dtype {slots.dtype}: "
                    f"expected int64 of length {key_len}",
                )
        if len(node.hash_value) != key_len // page_size:
            fail(node, f"{len(node.hash_value)} hashes for {key_len // page_size} pages")
        if node.lock_ref < 0 or node.host_ref < 0:
            fail(node, f"negative lock_ref {node.lock_ref} or host_ref {node.host_ref}")
        if parent.lock_ref < node.lock_ref:
            fail(node, f"lock_ref {node.lock_ref} exceeds its parent's {parent.lock_ref}")
        if node.value is None and node.host_value is None:
            fail(node, "evicted without backup (it must have been deleted)")
        if node.value is not None and parent.value is None:
            fail(node, "on the device below an evicted parent")
        if node.host_value is not None and parent.host_value is None:
            fail(node, "backed up below a parent without backup")
        if verify_hashes and node.hash_value != page_hashes(
            node.key, page_size, prev=parent.last_hash
        ):
            fail(node, "hash_value does not match its tokens and prefix")
        node_count += 1
        device_tokens += key_len if node.value is not None else 0
        host_tokens += key_len if node.host_value is not None else 0
    for name, counted, kept in (
        ("node_count", node_count, tree.node_count()),
        ("device_tokens", device_tokens, tree.device_tokens()),
        ("host_tokens", host_tokens, tree.host_tokens()),
    ):
        if counted != kept:
            raise TreeInvariantError(f"{name} is {kept} but the nodes add up to {counted}")
