"""Per-node data of state pools (e.g. mamba): one state after the node's last page."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

STATES_KEY = "states"


@dataclass
class StateRef:
    """One state pool's slots for a node, on each tier, with its own pin and LRU tick."""

    device: int | None = None
    host: int | None = None
    host_ref: int = 0  # pinned by a storage backup or a prefetch
    last_access: int = 0


def node_states(node: Any) -> dict[str, StateRef]:
    """The node's state per state pool (created empty on first use)."""
    return node.ext.setdefault(STATES_KEY, {})
