"""The 0.5.19/0.5.20 HiRadixCache, built from the user's tree on CPU, driven through its ACK drain (conformance/live/ack_drain.py).

Built with upstream's own classes (MHATokenToKVPool, its paged allocator,
the release's MHA host pool, HiCacheController, HiCacheFile), configured
through the runtime context its scheduler publishes. Requests are named as
the release names them (AckDrainSession.request).
"""

from __future__ import annotations

from array import array
from typing import Any, Mapping, Sequence

import torch

from conformance.live import probes
from conformance.live.ack_drain import AckDrainSession
from conformance.live.layouts.hiradix.session import configure as configure_hiradix
from conformance.live.layouts.hiradix_drain.taps import tap_drain_cache, tap_drain_controller
from conformance.live.runtime import Runtime
from conformance.live.taps import KV
from conformance.live.taps.host import tap_host_pool
from conformance.live.taps.storage import tap_storage
from conformance.live.tiers import mha_device_tier
from spec.decision import DecisionState


def configure(runtime: Runtime, fields: Mapping[str, Any]) -> None:
    """C1/C2 through upstream's CLI parser and HiRadixCache's extra-config parser."""
    configure_hiradix(runtime, fields)


class HiRadixDrainSession(AckDrainSession):
    """One upstream HiRadixCache of the 0.5.19/0.5.20 line for one test."""

    CLASS_NAME = "HiRadixCache"

    def build(self) -> Any:
        m = self.runtime.modules
        _, self.allocator, req_pool, self.kv = mha_device_tier(self.runtime, self.env, self.device_pages)
        params = m["cache_init_params"].CacheInitParams(
            disable=False, req_to_token_pool=req_pool, token_to_kv_pool_allocator=self.allocator,
            page_size=self.env.page_size, tp_cache_group=self.group)
        cache = m["hiradix_cache"].HiRadixCache(params, self.args)
        self.kv_host = cache.cache_controller.mem_pool_host
        return cache

    def tap(self) -> None:
        tap_host_pool(self.taps, self.kv_host, KV)
        self.acks = tap_drain_controller(self.taps, self.cc)
        tap_storage(self.taps, self.backend, self.storage_file_name)
        tap_drain_cache(self.taps, self.cache, self.decision_state)

    # --- requests --------------------------------------------------------------------------------

    def radix_key(self, tokens: Sequence[int]) -> Any:
        return self.runtime.modules["radix_cache"].RadixKey(array("q", tokens))

    def start_prefetch(self, request_id: str, tokens: Sequence[int]) -> int:
        m = self._node_hit(tokens)
        matched = len(m.device_indices) + int(m.host_hit_length)
        node = m.last_host_node
        with self.taps.scheduling(op=request_id, phase="prefetch"):
            self.cache.prefetch_from_storage(self.request(request_id), node, array("q", tokens[matched:]), last_hash=node.get_last_hash_value())
        entry = self.cache.ongoing_prefetch.get(request_id)
        return len(entry[1]) if entry is not None else 0

    def hit_drained(self, request_id: str) -> bool:
        entry = self.cache.ongoing_prefetch.get(request_id)
        return entry is None or entry[2].host_indices is not None

    def queued_operation(self, request_id: str) -> Any:
        entry = self.cache.ongoing_prefetch.get(request_id)
        return entry[2] if entry is not None else None

    # --- decision probes: check_prefetch_progress's decision on a real operation ---------------------

    def make_operation(self, state: DecisionState, *, start_time: float) -> Any:
        """A PrefetchOperation of the release's controller in `state`; its slots exist once the drain would have allocated them."""
        ps = self.env.page_size
        operation = self.runtime.module("cache_controller").PrefetchOperation(probes.PROBE_ID, [0] * (state.hit_pages * ps))
        operation.hash_value = [f"probe-{i}" for i in range(state.hit_pages)]
        operation.storage_hit_count = state.hit_pages * ps
        operation.host_indices = torch.arange(state.hit_pages * ps) if state.hit_pages else None
        operation.completed_tokens = state.completed_tokens
        operation.start_time = start_time
        if state.pool_transfers_present:
            operation.pool_transfers = [self.sidecars[0].probe_transfer()] if self.sidecars else ["indexer"]  # presence, for the decision
            operation.pool_transfers_done = state.pool_transfers_done
        if state.terminated:
            operation.mark_terminate()
        return operation

    def can_terminate(self, operation: Any) -> bool:
        """check_prefetch_progress's decision on one rank: terminated, or the class's vote."""
        vote = bool(self.cache.can_terminate_prefetch(operation))
        return operation.is_terminated() or vote
