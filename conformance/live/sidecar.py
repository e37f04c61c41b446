"""The sidecar seam: one extra pool of an upstream cache, as a session drives and observes it.

A layout's extra pool (the mamba state pool, the DSA indexer) is one
Sidecar object: its PoolLayout, its taps, how a request's data for it
enters the device tier, what evicting it takes, what a load-back of it
reads, and the transfer a decision probe's operation carries. The defaults
are those of a pool that needs none of it.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

from conformance.adapter import PoolLayout
from conformance.live.taps import Taps


class Sidecar:
    name: str = ""
    layout: PoolLayout
    # A pool on the KV host slots (indices_from_pool=KV) loads back with KV, and only when KV does.
    rides_kv_slots: bool = False

    def tap(self, taps: Taps) -> None:
        """Record this pool's host slots and IO (its storage IO is recorded by the storage taps once its name is tracked)."""

    def stage(self, slots: torch.Tensor, data: Mapping[str, torch.Tensor]) -> None:
        """Write this pool's rows of a request at the KV device slots `slots` (before the insert)."""

    def evict_fields(self) -> dict[str, Any]:
        """EvictParams fields that evict this pool's device part as well."""
        return {}

    def evict_host(self) -> None:
        """Empty this pool's host part, where it has one of its own."""

    def has_host_hit(self, match: Any) -> bool:
        """Whether a match needs a load-back for this pool alone."""
        return False

    def record_load_back(self, match: Any, host_pages: list[tuple[int, str]]) -> None:
        """LOAD_BACK of this pool's host pages about to be copied (`host_pages`: the KV pages loaded, (first host slot, page hash)).

        Called before the load is set up, or, for a pool that rides the KV slots, once KV's load is."""

    def loaded(self, match: Any, device_slots: torch.Tensor) -> torch.Tensor | None:
        """This pool's device bytes for the match just loaded back (None: nothing of it to compare)."""
        return None

    def probe_transfer(self) -> Any:
        """The PoolTransfer a decision probe's operation carries for this pool."""
        raise NotImplementedError

    def accounting(self) -> dict[str, tuple[int, int, int]]:
        return {}
