"""0.5.2x's UnifiedRadixCache, built from the user's tree on CPU, driven through its own scheduler protocol.

The 0.5.2x layout is configured through global server-args sections (the
runtime context a scheduler publishes), builds its tree core and its
components from CacheInitParams (here the full-attention component alone,
on upstream's MHA KV pool), and attaches HiCache afterwards
(init_hicache: the host pool group, HybridCacheController, HiCacheFile).
Requests are named as the release names them (an id in 0.5.19, a
CacheRequestHandle after); a load-back takes the scheduler's Req.
Prefetches are committed by the ACK drain inside check_hicache_events,
not by check_prefetch_progress (taps.py says where each event is recorded).
"""

from __future__ import annotations

from array import array
from dataclasses import replace
from typing import Any, Callable, Mapping, Sequence

import torch

from conformance.live import probes
from conformance.live.ack_drain import AckDrainSession
from conformance.live.configuration import configure_through
from conformance.live.layouts.unified.taps import side_hosts_of, tap_load_back, tap_unified_cache, tap_ack_drain_controller
from conformance.live.runtime import Runtime
from conformance.live.taps import KV
from conformance.live.taps.host import tap_host_pool
from conformance.live.taps.storage import tap_storage
from conformance.live.tiers import mha_device_tier
from spec.decision import DecisionState
from spec.timeout import is_timed_out, timeout_budget



def device_prefix_len(match: Any) -> int:
    """The device-resident matched length: 0.5.22+ says it, 0.5.21's match holds the slots."""
    length = getattr(match, "device_prefix_len", None)
    return int(length) if length is not None else len(match.device_indices)


def configure(runtime: Runtime, fields: Mapping[str, Any]) -> None:
    """C1/C2 through upstream's CLI parser and HybridCacheController's extra-config parser (what init_hicache calls)."""
    parse = runtime.module("hybrid_cache_controller").HybridCacheController.parse_storage_backend_extra_config
    configure_through(runtime, fields, lambda _cls, extra: parse(extra))


def component_tree(session: Any, component_type: Any, req_pool: Any, **params_fields: Any) -> Any:
    """A UnifiedRadixCache with the session's TREE_COMPONENTS (members of upstream's `component_type`) on the device tier
    its build() made, then init_hicache (upstream's assembler picks the host stack from the device pool); sets the
    session's KV host pool."""
    m = session.runtime.modules
    components = tuple(getattr(component_type, name) for name in session.TREE_COMPONENTS)
    params = m["cache_init_params"].CacheInitParams(
        disable=False, req_to_token_pool=req_pool, token_to_kv_pool_allocator=session.allocator, page_size=session.env.page_size,
        tp_cache_group=session.group, tree_components=components, **params_fields)
    cache = m["unified_radix_cache"].UnifiedRadixCache(params)
    cache.init_hicache(session.args, params)
    session.kv_host = cache.cache_controller.mem_pool_host.anchor_entry.host_pool
    return cache


class UnifiedSession(AckDrainSession):
    """One upstream UnifiedRadixCache instance (full-attention component, HiCache with the file backend) for one test."""

    CLASS_NAME = "UnifiedRadixCache"
    # Where the drain fixes a hit: None, 0.5.22+'s allocate_storage_hit (a build allocating inline names its tap).
    TAP_ALLOCATION: Callable[[Any, Any], None] | None = None
    # The tree's components, as upstream's scheduler picks them for the model (create_unified_radix_cache).
    TREE_COMPONENTS: tuple[str, ...] = ("FULL",)

    def build(self) -> Any:
        _, self.allocator, req_pool, self.kv = mha_device_tier(self.runtime, self.env, self.device_pages)
        return self.build_unified(req_pool)

    def build_unified(self, req_pool: Any, **params_fields: Any) -> Any:
        """The component tree on the device tier build() made (component_tree), and the session's request state."""
        cache = component_tree(self, self.runtime.modules["components"].ComponentType, req_pool, **params_fields)
        self._first_blocked: dict[str, float] = {}  # request -> when its first check found it unfinished (A3)
        return cache

    def tap(self) -> None:
        """The unified cache's own tap points (taps.py) in place of the fork's."""
        tap_host_pool(self.taps, self.kv_host, KV)
        self.acks = tap_ack_drain_controller(self.taps, self.cc, self.TAP_ALLOCATION)
        tap_load_back(self.taps, self.cc, self.kv_host, side_hosts_of(self.sidecars, self.env.page_size))
        tap_storage(self.taps, self.backend, self.storage_file_name)
        tap_unified_cache(self.taps, self.cache, self.decision_state)

    # --- requests --------------------------------------------------------------------------------

    def radix_key(self, tokens: Sequence[int]) -> Any:
        return self.runtime.modules["radix_cache"].RadixKey(array("q", tokens))

    # --- the protocol ------------------------------------------------------------------------------

    def match(self, tokens: Sequence[int]) -> tuple[int, int]:
        m = self._node_hit(tokens)
        return device_prefix_len(m), int(m.host_hit_length)

    def start_prefetch(self, request_id: str, tokens: Sequence[int]) -> int:
        m = self._node_hit(tokens)
        matched = device_prefix_len(m) + int(m.host_hit_length)
        node, handle = m.last_host_node, self.request(request_id)
        with self.taps.scheduling(op=request_id, phase="prefetch"):
            self.cache.prefetch_from_storage(handle, node, array("q", tokens[matched:]), last_hash=self.cache.get_last_hash_value(node))
        entry = self.cache.ongoing_prefetch.get(handle)
        return len(entry.prefetch_key) if entry is not None else 0

    def hit_drained(self, request_id: str) -> bool:
        current = self.cache.ongoing_prefetch.get(self.request(request_id))
        return current is None or current.host_indices is not None

    def queued_operation(self, request_id: str) -> Any:
        current = self.cache.ongoing_prefetch.get(self.request(request_id))
        return current.operation if current is not None else None

    def loaded_slots(self, tokens: Sequence[int]) -> tuple[Any, torch.Tensor]:
        """init_load_back with the scheduler's Req, start_loading, then the next step's loading_check."""
        m = self.runtime.modules
        match = self._node_hit(tokens)
        req = None
        if int(match.host_hit_length) or any(s.has_host_hit(match) for s in self.sidecars):
            req = m["schedule_batch"].Req("load-back", "", array("q", tokens), m["sampling_params"].SamplingParams(max_new_tokens=1))
            req.last_node = match.last_device_node
            self.cache.init_load_back(m["base_prefix_cache"].InitLoadBackParams(
                best_match_node=match.best_match_node, host_hit_length=int(match.host_hit_length), req=req))
            self.cache.ready_to_load_host_cache()
        self.cache.check_hicache_events()
        if req is not None:
            self.request_finished(req)
        match = self._node_hit(tokens)
        if not hasattr(self.cache, "path_device_indices"):  # 0.5.21: the match carries the prefix's device slots
            return match, match.device_indices
        return match, self.cache.path_device_indices(match.last_device_node)

    def request_finished(self, req: Any) -> None:
        """What the scheduler frees of a finished request the tree does not own (a component's per-request state)."""

    # --- decision probes: the class's own _can_terminate_prefetch on a real operation ---------------

    def decision_state(self, operation: Any) -> DecisionState | None:
        """The state a vote saw, "timed out" measured as the ACK drain's profile measures it (A3).

        Its timer starts at the first check that finds the prefetch unfinished,
        which is the first vote the harness sees for it (the clock does not
        move within a check); a decision probe's timer starts at the start
        time make_operation gave it.
        """
        state = probes.decision_state(self.env, operation)
        if state is None or operation.request_id == probes.PROBE_ID:
            return state
        now = self.env.clock.now()
        start = self._first_blocked.setdefault(operation.request_id, now)
        return replace(state, timed_out=is_timed_out(start, now, timeout_budget(self.env.termination, state.hit_pages)))

    def make_operation(self, state: DecisionState, *, start_time: float) -> Any:
        """A hybrid PrefetchOperation in `state`; its wait timer started at `start_time`, as the first blocked poll starts it."""
        ps = self.env.page_size
        operation = self.runtime.module("hybrid_cache_controller").PrefetchOperation(self.request(probes.PROBE_ID), [0] * (state.hit_pages * ps))
        operation.hash_value = [f"probe-{i}" for i in range(state.hit_pages)]
        operation.storage_hit_count = operation.stats_requested_tokens = state.hit_pages * ps
        # The drain allocates host slots only for a hit: with none, the operation has none (upstream revokes it there).
        operation.host_indices = torch.arange(state.hit_pages * ps) if state.hit_pages else None
        operation.completed_tokens = state.completed_tokens
        operation.start_time = start_time
        if state.pool_transfers_present:
            operation.pool_transfers = ["mamba"]  # read for presence only by the decision
            operation.pool_transfers_done = state.pool_transfers_done
        waits = getattr(self.cache, "_storage_prefetch_wait", None)  # 0.5.23's poll timer; 0.5.22 times from start_time
        if waits is not None:
            waits.pop(operation.handle, None)
            self.cache._start_storage_prefetch_wait(operation)
            wait = waits.get(operation.handle)
            if wait is not None:
                wait.timer.started_at = start_time
        if state.terminated:
            operation.mark_terminate()
        return operation

    def can_terminate(self, operation: Any) -> bool:
        """check_prefetch_progress's decision: a terminated operation ends, otherwise the class's vote decides.

        Upstream skips the vote of a terminated operation; the probe casts it anyway, so that every probe records its vote.
        """
        vote = bool(self.cache._can_terminate_prefetch(operation))
        return operation.is_terminated() or vote
