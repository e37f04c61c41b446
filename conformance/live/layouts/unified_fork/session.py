"""The fork's UnifiedRadixCache, built from the user's tree on CPU: the component tree over the fork's prefetch protocol.

What it shares with the fork's HiRadixCache (the base LiveSession): the
prefetch queued with its host slots, check_prefetch_progress(req_id)'s vote
and commit into _insert_helper_host, release_aborted_request, the
HybridCacheController's threads. What differs: the tree is built from
tree_components and attaches HiCache in init_hicache (the hybrid assembler
picks the host stack from the device pool), a load-back takes the
scheduler's Req (init_load_back asserts one), and the cache has no shutdown
(its detach_storage_backend refuses), so the controller's own detach ends
its storage threads.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from conformance.live.layouts.unified.session import component_tree, configure  # noqa: F401  (configure: the adapter's C1/C2 entry)
from conformance.live.layouts.unified.taps import side_hosts_of, tap_load_back
from conformance.live.session import LiveSession
from conformance.live.tiers import mha_device_tier


class ForkUnifiedSession(LiveSession):
    """One upstream UnifiedRadixCache of the fork's layout (full-attention component, HiCache with the file backend)."""

    CLASS_NAME = "UnifiedRadixCache"
    TREE_COMPONENTS: tuple[str, ...] = ("FULL",)

    def build(self) -> Any:
        _, self.allocator, req_pool, self.kv = mha_device_tier(self.runtime, self.env, self.device_pages)
        return self.build_unified(req_pool)

    def build_unified(self, req_pool: Any, **params_fields: Any) -> Any:
        return component_tree(self, self.runtime.modules["tree_component"].ComponentType, req_pool, **params_fields)

    def tap(self) -> None:
        """The fork's taps, and each queued load's pages recorded where the controller starts it (the tree's nodes hold
        their host slots per component, so the load is read from the controller's queue)."""
        super().tap()
        tap_load_back(self.taps, self.cc, self.kv_host, side_hosts_of(self.sidecars, self.env.page_size))

    def loaded_slots(self, tokens: Sequence[int]) -> tuple[Any, torch.Tensor]:
        """init_load_back with the scheduler's Req, start_loading, then the next step's loading_check."""
        __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
        m = self.runtime.modules
        match, req = self._node_hit(tokens), None
        if int(match.host_hit_length) or any(s.has_host_hit(match) for s in self.sidecars):
            req = m["schedule_batch"].Req("load-back", "", list(tokens), m["sampling_params"].SamplingParams(max_new_tokens=1))
            req.last_node = match.last_device_node
            req.mamba_host_hit_length = int(getattr(match, "mamba_host_hit_length", 0))  # as the scheduler copies the match
            self.cache.init_load_back(m["base_prefix_cache"].InitLoadBackParams(
                best_match_node=match.best_match_node, host_hit_length=int(match.host_hit_length), req=req))
            self.cache.ready_to_load_host_cache()
        self.cache.check_hicache_events()  # every rank runs it (loading_check's collectives), loaded or not
        if req is not None:
            self.request_finished(req)
        match = self._node_hit(tokens)
        return match, match.device_indices

    def request_finished(self, req: Any) -> None:
        """What the scheduler frees of a finished request the tree does not own (a component's per-request state)."""

    def shutdown(self) -> None:
        self.cc.detach_storage_backend()
