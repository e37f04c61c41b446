"""The fork's UnifiedRadixCache with its sliding-window component: the fork's unified session (layouts/unified_fork) on
a hybrid SWA device tier (tier.py), the window a TRAILING_WINDOW sidecar (sidecar.py).

A request's window rows are written at the window slots its KV slots map to,
then inserted with its tokens, as the scheduler caches a finished request
(every token inside the window: swa_evicted_seqlen 0).
"""

from __future__ import annotations

from typing import Any

import torch

from conformance.live.layouts.unified_fork.session import ForkUnifiedSession, configure  # noqa: F401  (the adapter's C1/C2 entry)
from conformance.live.layouts.unified_fork_swa.sidecar import SwaSidecar
from conformance.live.layouts.unified_fork_swa.tier import swa_device_tier

WINDOW_PAGES = 2  # the model's sliding window, in pages: shorter than the prefixes the scenarios store


class SwaComponentSession:
    """What a UnifiedRadixCache session with the SWA component adds (mixed in before the layout's session class)."""

    TREE_COMPONENTS = ("FULL", "SWA")
    SIDECAR: type[SwaSidecar] = SwaSidecar

    def build(self) -> Any:
        req_pool, rows = swa_device_tier(self)
        window = WINDOW_PAGES * self.env.page_size
        cache = self.build_unified(req_pool, sliding_window_size=window)
        self.sidecars = [self.SIDECAR(cache, rows, window, self.runtime.modules)]
        return cache

    def _alloc_device(self, tokens: int) -> torch.Tensor:
        """A request's full-attention slots and the window slots they map to, as upstream's own load-back takes them.

        The scheduler's paged alloc_extend runs a Triton kernel (no CPU path),
        and the allocator's alloc serves page size 1 only; for a request without
        a prefix, in whole pages, both come to what the load-back does: pages of
        each sub-allocator, then set_full_to_swa_mapping.
        """
        __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
        a = self.allocator
        if a.full_available_size() < tokens or a.swa_available_size() < tokens:
            self.cache.evict(self.runtime.modules["base_prefix_cache"].EvictParams(num_tokens=tokens, swa_num_tokens=tokens))
        if a.full_available_size() < tokens or a.swa_available_size() < tokens:
            raise AssertionError(f"sglang-live: no device room for {tokens} tokens (full and window) after eviction")
        full = a.full_attn_allocator.alloc(tokens)
        a.set_full_to_swa_mapping(full, a.swa_attn_allocator.alloc(tokens))
        return full


class ForkUnifiedSwaSession(SwaComponentSession, ForkUnifiedSession):
    pass
