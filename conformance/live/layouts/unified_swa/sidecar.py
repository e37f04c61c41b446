"""The sliding-window pool of 0.5.2x's UnifiedRadixCache as a sidecar: the fork's TRAILING_WINDOW sidecar
(layouts/unified_fork_swa/sidecar.py), read and recorded through interfaces every tree core has.

0.5.21+ runs the Rust tree core by default, which has no Python nodes and
never calls the SWA component's Python commit. So the window a match serves
is read as upstream's attention reads it: the window rows at the slots the
allocator maps the match's last full slots to (translate_loc_from_full_to_swa;
a mapping cleared to the padding slot 0 is a window the tree dropped); and
the window's host slots a prefetch's commit attaches to the tree are those
of its SWA transfer that the commit did not release (the commit's
FreeComponentHostSlot actions), read at the tree core's
commit_hicache_transfers.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from conformance.live.layouts.unified_fork_swa.sidecar import SWA, SwaSidecar
from conformance.live.taps import Taps, wrap
from conformance.live.taps.host import tap_host_pool

PADDING_SLOT = 0  # what a cleared full-to-window mapping reads (the allocators never hand out slot 0)


def released_host_slots(actions: Sequence[Any], component: Any) -> set[int]:
    """The host slots of `component` that these cache actions free (FreeComponentHostSlot: host_indices, component_type)."""
    return {slot for action in actions if getattr(action, "component_type", None) == component
            for indices in getattr(action, "host_indices", None) or () for slot in indices.tolist()}


class UnifiedSwaSidecar(SwaSidecar):
    COMPONENTS_MODULE = "components"  # the module (short name) of upstream's ComponentType and CacheTransferPhase

    def tap(self, taps: Taps) -> None:
        """The window's host slots, and those a prefetch's commit attaches to the tree."""
        tap_host_pool(taps, self.host, SWA)
        prefetch, component = self.modules[self.COMPONENTS_MODULE].CacheTransferPhase.PREFETCH, self._type()

        def committing(original: Callable) -> Callable:
            def wrapper(node: Any, phase: Any, transfers: Any, *args: Any, cache_actions: list, **kwargs: Any) -> Any:
                before = len(cache_actions)
                result = original(node, phase, transfers, *args, cache_actions=cache_actions, **kwargs)
                window = (transfers or {}).get(component) or ()
                if phase == prefetch and window and window[0].host_indices is not None:
                    released = released_host_slots(cache_actions[before:], component)
                    taps.inserted(taps.ctx.op, [s for s in window[0].host_indices.tolist() if s not in released], pool=SWA)
                return result
            return wrapper

        wrap(self.cache.tree_core, "commit_hicache_transfers", committing)

    def loaded(self, match: Any, device_slots: torch.Tensor) -> torch.Tensor | None:
        """The window rows attention reads for the match: at the window slots its last full slots map to; None where
        one of them maps to no window slot."""
        want = min(self.window_tokens, len(device_slots))
        if not want:
            return None
        allocator = self.cache.token_to_kv_pool_allocator
        window = allocator.translate_loc_from_full_to_swa(device_slots[-want:].to(torch.int64)).to(torch.int64)
        if bool((window == PADDING_SLOT).any()):
            return None
        return self.rows.read(window)
