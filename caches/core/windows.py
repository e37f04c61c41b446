"""Window pools: per-node token data a cache component owns, in a slot group of its own.

A TRAILING_WINDOW pool (sliding-window KV) keeps, for a match end, only the
pages within the window before it (spec clause F10). Its slots are not the
tree's: the component owning the pool keeps them per node, on each tier,
drops them by its own LRU, and says where a match may end. The core's
paths move the bytes (write, backups, load-back, prefetch) and ask the owner
through this protocol; a cache lists its owners in `CacheHooks.windows`.

Per node the data is all or nothing: slots for every token of the node on a
tier, or none there (a tombstone: the node keeps its full-attention KV).
"""

from __future__ import annotations

from typing import Mapping, Protocol, Sequence

import torch

from caches.core.tree_node import TreeNode
from spec.trace import DEVICE, HOST


class WindowOwner(Protocol):
    pool: str  # the pool, and the name of its slot group
    window_tokens: int  # tokens before a match end it must hold (whole pages)

    def slots(self, node: TreeNode, tier: str) -> torch.Tensor | None:
        """The node's slots on `tier` (one per token of the node), or None."""

    def set_slots(self, node: TreeNode, tier: str, slots: torch.Tensor) -> None:
        """Give a node without data on `tier` these slots (their bytes are in place)."""

    def drop(self, node: TreeNode, tier: str) -> None:
        """Forget the node's data on `tier` (its slots are freed once no copy touches them)."""

    def store_write(self, end: TreeNode, rows: torch.Tensor) -> None:
        """A write ended at `end`: `rows` are the pool's data for every token of the path to it; keep its window."""

    def window_nodes(self, end: TreeNode) -> list[TreeNode] | None:
        """The nodes of the window ending at `end`, nearest the root first; None when one of them has no data on either tier."""

    def attach(self, end: TreeNode, slots: Sequence[int]) -> list[int]:
        """A commit: `slots` hold the pool's host bytes of the last len(slots) tokens before `end`'s end.

        Each node in that range without host data takes its part (a node
        straddling the range's start is split first); returns the slots taken.
        """


def device_window(owner: WindowOwner, end: TreeNode) -> torch.Tensor | None:
    """The device slots of the whole window ending at `end`, in token order; None when any part is not on the device, or at the root."""
    nodes = owner.window_nodes(end)
    if not nodes:  # a part missing, or the root: no match ends there
        return None
    parts = []
    for node in nodes:
        part = owner.slots(node, DEVICE)
        if part is None:
            return None
        parts.append(part)
    slots = torch.cat(parts)
    return slots[max(len(slots) - owner.window_tokens, 0):]


def host_only(owner: WindowOwner, nodes: Sequence[TreeNode]) -> list[TreeNode]:
    """Nodes whose data is on the host only: what a load-back must copy to the device."""
    return [n for n in nodes if owner.slots(n, DEVICE) is None and owner.slots(n, HOST) is not None]


def host_only_windows(owners: Mapping[str, WindowOwner], end: TreeNode) -> dict[str, list[TreeNode]]:
    """Per window pool, the nodes of the window ending at `end` whose data is on the host only (pools with none left out)."""
    found = {pool: host_only(owner, owner.window_nodes(end) or []) for pool, owner in owners.items()}
    return {pool: nodes for pool, nodes in found.items() if nodes}


NoWindows: Mapping[str, WindowOwner] = {}
