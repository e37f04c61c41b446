"""The radix tree's node and the results of its lookups and inserts.

A node holds ``key`` (whole pages of token ids), its device slots (``value``,
None once evicted from the device), its host slots (``host_value``, None
until backed up), one chained hash per page, pins and a logical access tick.
Per-cache data (a mamba state, a component's locks) lives in ``ext``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Union

import torch

from caches.errors import CacheError
from spec.errors import bounded_repr

__all__ = [
    "InsertResult",
    "MatchResult",
    "NodeCallback",
    "NodePredicate",
    "SplitCallback",
    "TreeInvariantError",
    "TreeNode",
    "TreeUsageError",
]

Tokens = Union[Sequence[int], torch.Tensor]
Slots = Union[Sequence[int], torch.Tensor]
NodeCallback = Callable[["TreeNode"], None]
NodePredicate = Callable[["TreeNode"], bool]
SplitCallback = Callable[["TreeNode", "TreeNode"], None]


class TreeUsageError(CacheError, ValueError):
    """A call the tree refuses: misaligned tokens, wrong slot count, bad unlock, ..."""


class TreeInvariantError(CacheError, RuntimeError):
    """The tree's structure is inconsistent (raised by check_invariants and guards)."""


class TreeNode:
    """One edge of the tree: ``key`` tokens and the per-page data that goes with them."""

    __slots__ = (
        "id",
        "key",
        "children",
        "parent",
        "value",
        "host_value",
        "hash_value",
        "lock_ref",
        "host_ref",
        "hit_count",
        "last_access",
        "ext",
    )

    def __init__(self, node_id: int, key: tuple[int, ...], parent: TreeNode | None) -> None:
        self.id = node_id
        self.key = key
        # Keyed by the child's first page of tokens.
        self.children: dict[tuple[int, ...], TreeNode] = {}
        self.parent = parent
        self.value: torch.Tensor | None = None
        self.host_value: torch.Tensor | None = None
        self.hash_value: list[str] = []
        self.lock_ref = 0
        # Host pin of this node only: a prefetch or storage backup reads its host data.
        self.host_ref = 0
        self.hit_count = 0
        self.last_access = 0
        # Per-cache extension data (for example a mamba state slot).
        self.ext: dict = {}

    @property
    def evicted(self) -> bool:
        return self.value is None

    @property
    def backuped(self) -> bool:
        return self.host_value is not None

    @property
    def last_hash(self) -> str | None:
        """Hash of this node's last page (None for the root): chains into children."""
        return self.hash_value[-1] if self.hash_value else None

    def __repr__(self) -> str:
        return (
            f"TreeNode(id={self.id}, tokens={len(self.key)}, evicted={self.evicted}, "
            f"backuped={self.backuped}, lock_ref={self.lock_ref}, host_ref={self.host_ref})"
        )


@dataclass(slots=True)
class MatchResult:
    """Outcome of :meth:`RadixTree.match_prefix`.

    ``device_slots`` covers ``[0, len(device_slots))`` of the tokens; the next
    ``host_hit_tokens`` tokens are only on the host. ``host_node`` is the last matched
    node (``device_node`` itself when there is no host hit).
    ``deepest_backed_up_node`` is the deepest matched node whose host copy exists (the
    root counts as backed up): where a storage prefetch attaches.
    ``device_slots`` may be a node's own tensor (no copy when one node covers the
    hit): read it, never write into it.
    ``host_window_tokens``: per window pool (sliding-window KV), the tokens of
    the window before the match end whose data is on the host only, even where
    the KV is on the device. Such a match is served from the host tier (F10):
    ``needs_load_back`` is true, and ``load_back(host_node)`` brings the KV's
    host part and those windows together.
    """

    device_slots: torch.Tensor
    device_node: TreeNode
    host_node: TreeNode
    host_hit_tokens: int
    matched_tokens: int
    deepest_backed_up_node: TreeNode
    host_window_tokens: dict[str, int] = field(default_factory=dict)

    @property
    def device_hit_tokens(self) -> int:
        return len(self.device_slots)

    @property
    def needs_load_back(self) -> bool:
        """Serving this match needs load_back(host_node) first: KV or a window is on the host only."""
        return self.host_hit_tokens > 0 or any(self.host_window_tokens.values())


@dataclass(slots=True)
class InsertResult:
    """Outcome of :meth:`RadixTree.insert` and :meth:`RadixTree.insert_host`.

    ``duplicate_slots`` are the caller's slots for the part already present: the
    caller frees them once no copy into or out of them is pending. ``restored_nodes``
    took the caller's slots for a part that existed without that copy (an evicted
    node restored by ``insert``, a device-only node backed up by ``insert_host``).
    """

    prefix_len: int
    duplicate_slots: torch.Tensor
    node: TreeNode
    new_node: TreeNode | None = None
    existing_nodes: list[TreeNode] = field(default_factory=list)
    restored_nodes: list[TreeNode] = field(default_factory=list)


def as_tokens(tokens: Tokens) -> tuple[int, ...]:
    if isinstance(tokens, tuple):
        return tokens
    if isinstance(tokens, torch.Tensor):
        if tokens.dim() != 1:
            raise TreeUsageError(
                f"tokens tensor has shape {tuple(tokens.shape)}: expected one dimension"
            )
        return tuple(tokens.tolist())
    return tuple(tokens)


def non_negative_int(field_name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TreeUsageError(f"{field_name} is {bounded_repr(value)}: expected a non-negative int")
    return value


def as_slots(
    field_name: str, slots: Slots, expected_len: int, device: torch.device
) -> torch.Tensor:
    if isinstance(slots, torch.Tensor):
        if slots.dtype == torch.bool or slots.is_floating_point() or slots.is_complex():
            raise TreeUsageError(
                f"{field_name} has dtype {slots.dtype}: expected integer slot ids"
            )
        tensor = slots.to(device=device, dtype=torch.int64)
    else:
        tensor = torch.as_tensor(list(slots))
        if tensor.numel() and (tensor.dtype == torch.bool or tensor.is_floating_point()):
            raise TreeUsageError(f"{field_name} is {bounded_repr(slots)}: expected integer slot ids")
        tensor = tensor.to(device=device, dtype=torch.int64)
    if tensor.dim() != 1 or len(tensor) != expected_len:
        raise TreeUsageError(
            f"{field_name} has shape {tuple(tensor.shape)}: expected {expected_len} "
            "slot ids, one per token"
        )
    return tensor


def concat_slots(parts: list[torch.Tensor], empty: torch.Tensor) -> torch.Tensor:
    if not parts:
        return empty
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def check_aligned(key: tuple[int, ...], page_size: int) -> None:
    if len(key) % page_size:
        raise TreeUsageError(f"tokens has {len(key)} ids: expected a multiple of page_size {page_size}")


def checked_hashes(hashes: Sequence[str], num_tokens: int, page_size: int) -> list[str]:
    hash_list = list(hashes)
    expected = num_tokens // page_size
    if len(hash_list) != expected or not all(isinstance(h, str) for h in hash_list):
        raise TreeUsageError(f"hashes has {len(hash_list)} entries: expected {expected} str, one per page")
    return hash_list
