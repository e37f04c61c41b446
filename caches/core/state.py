"""Per-node data of state pools (e.g. mamba): one state after the node's last page."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class StateRef:
    """One state pool's slots for a node, on each tier, with its own pin and LRU tick."""

    device: int | None = None
    host: int | None = None
    host_ref: int = 0  # pinned by a storage backup or a prefetch
    last_access: int = 0
