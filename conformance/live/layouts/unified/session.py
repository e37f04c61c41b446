"""0.5.2x's UnifiedRadixCache, built from the user's tree on CPU, driven through its own scheduler protocol.

The 0.5.2x layout is configured through global server-args sections (the
runtime context a scheduler publishes), builds its tree core and its
components from CacheInitParams (here the full-attention component alone,
on upstream's MHA KV pool), and attaches HiCache afterwards
(init_hicache: the host pool group, HybridCacheController, HiCacheFile).
Requests are CacheRequestHandles; a load-back takes the scheduler's Req.
Prefetches are committed by the ACK drain inside check_hicache_events,
not by check_prefetch_progress (taps.py says where each event is recorded).
"""

from __future__ import annotations

from array import array
from dataclasses import replace
from typing import Any, Callable, Mapping, Sequence

import torch

from conformance.live import probes
from conformance.live.configuration import configure_through, server_args_fields
from conformance.live.layouts.unified.taps import tap_load_back, tap_unified_cache, tap_unified_controller
from conformance.live.runtime import Runtime, ensure_process_group
from conformance.live.scheduler import ROUNDS
from conformance.live.session import LiveSession
from conformance.live.taps import KV
from conformance.live.taps.host import tap_host_pool
from conformance.live.taps.storage import tap_storage
from conformance.live.threads import FORK_THREADS
from conformance.live.tiers import mha_device_tier
from spec.decision import DecisionState
from spec.timeout import is_timed_out, timeout_budget
from spec.trace import EventKind

# The dummy model is upstream's own no-model path through ServerArgs.__post_init__.
NO_MODEL = "dummy"


def configure(runtime: Runtime, fields: Mapping[str, Any]) -> None:
    """C1/C2 through upstream's CLI parser and HybridCacheController's extra-config parser (what init_hicache calls)."""
    parse = runtime.module("hybrid_cache_controller").HybridCacheController.parse_storage_backend_extra_config
    configure_through(runtime, fields, lambda _cls, extra: parse(extra))


class UnifiedSession(LiveSession):
    """One upstream UnifiedRadixCache instance (full-attention component, HiCache with the file backend) for one test."""

    CLASS_NAME = "UnifiedRadixCache"
    THREADS = (*FORK_THREADS, "prefetch_sync_thread")

    def configure(self, host_ratio: float) -> tuple[Any, Any]:
        """Publish the server args as upstream's scheduler does (runtime_context.publish), then join its process groups (their widths come from it)."""
        args = self.runtime.server_args_cls(model_path=NO_MODEL, tp_size=self.env.world_size, **server_args_fields(self.env, host_ratio))
        context = self.runtime.module("runtime_context")
        context.publish(args, role="scheduler", ranks=context.SpawnRanks(world_rank=self.env.rank))
        return ensure_process_group(self.runtime, self.env.rank, self.env.world_size), args

    def build(self) -> Any:
        m = self.runtime.modules
        _, self.allocator, req_pool, self.kv = mha_device_tier(self.runtime, self.env, self.device_pages)
        params = m["cache_init_params"].CacheInitParams(
            disable=False, req_to_token_pool=req_pool, token_to_kv_pool_allocator=self.allocator, page_size=self.env.page_size,
            tp_cache_group=self.group, tree_components=(m["components"].ComponentType.FULL,))
        cache = m["unified_radix_cache"].UnifiedRadixCache(params)
        cache.init_hicache(self.args, params)
        self.kv_host = cache.cache_controller.mem_pool_host.anchor_entry.host_pool
        self.handles: dict[str, Any] = {}
        self._first_blocked: dict[str, float] = {}  # request -> when its first check found it unfinished (A3)
        return cache

    def tap(self) -> None:
        """The unified cache's own tap points (taps.py) in place of the fork's."""
        tap_host_pool(self.taps, self.kv_host, KV)
        self.acks = tap_unified_controller(self.taps, self.cc)
        tap_load_back(self.taps, self.cc, self.kv_host)
        tap_storage(self.taps, self.backend, self.storage_file_name)
        tap_unified_cache(self.taps, self.cache, self.decision_state)

    # --- requests --------------------------------------------------------------------------------

    def handle(self, request_id: str) -> Any:
        """The scheduler's handle of a request (one attempt per request here)."""
        if request_id not in self.handles:
            self.handles[request_id] = self.runtime.module("base_prefix_cache").CacheRequestHandle(request_id, 0)
        return self.handles[request_id]

    def radix_key(self, tokens: Sequence[int]) -> Any:
        return self.runtime.modules["radix_cache"].RadixKey(array("q", tokens))

    # --- the protocol ------------------------------------------------------------------------------

    def match(self, tokens: Sequence[int]) -> tuple[int, int]:
        m = self._node_hit(tokens)
        return int(m.device_prefix_len), int(m.host_hit_length)

    def prefetch(self, request_id: str, tokens: Sequence[int]) -> int:
        """prefetch_from_storage, then the scheduler's steps until the ACK drain has taken its hit (allocated it, or revoked it).

        The 0.5.2x prefetch thread only queries storage: its IO starts once a
        scheduler step's drain allocates the hit's host slots.
        """
        m = self._node_hit(tokens)
        matched = int(m.device_prefix_len) + int(m.host_hit_length)
        node, handle = m.last_host_node, self.handle(request_id)
        with self.taps.scheduling(op=request_id, phase="prefetch"):
            self.cache.prefetch_from_storage(handle, node, array("q", tokens[matched:]), last_hash=self.cache.get_last_hash_value(node))
        entry = self.cache.ongoing_prefetch.get(handle)
        if entry is None:
            return 0

        def hit_drained() -> bool:
            current = self.cache.ongoing_prefetch.get(handle)
            return current is None or current.host_indices is not None

        self.pump(hit_drained, f"the ACK drain to take the storage hit of {request_id}")
        return len(entry.prefetch_key)

    def wait_prefetch_io(self, request_id: str) -> None:
        """Wait (bounded) until upstream's IO thread queued the final ACK of the prefetch, and its sync thread forwarded it.

        No scheduler step runs meanwhile: the drain that would commit the
        prefetch is the next check's (or an abort's) to run, as in upstream,
        where the IO thread's progress reaches the scheduler only at its steps.
        The prefetch's IO was handed to the IO thread when prefetch() returned.
        """
        if not self.taps.wait_io_done(request_id, self.env.wait_timeout_s):
            raise AssertionError(f"L4: sglang-live: upstream's IO thread did not finish the IO of {request_id} within "
                                 f"{self.env.wait_timeout_s}s ({self.storage_threads.state()})")
        self.settle_acks()

    def pump(self, done: Callable[[], bool], what: str) -> None:
        """check_hicache_events as upstream's scheduler runs it each step, on every rank, until `done` holds on every rank."""
        io_done = self.taps.io_done

        def waiting(timeout_s: float) -> None:
            with io_done:
                io_done.wait_for(done, timeout_s)

        if not self.drive.steps_until_settled(self.cache.check_hicache_events, lambda: not done(), waiting):
            raise AssertionError(f"L4: sglang-live: waited {self.env.wait_timeout_s}s ({ROUNDS} scheduler steps) for {what} ({self.storage_threads.state()})")

    def check_progress(self, request_ids: Sequence[str]) -> dict[str, int]:
        """One scheduler step. The ACK drain may have committed a prefetch in an earlier step (or a flush): its last commit counts."""
        finished: dict[str, int] = {}
        self.settle_acks()
        with self.taps.scheduler_step():
            self.cache.check_hicache_events()
            for request_id in request_ids:
                handle = self.handle(request_id)
                if self.cache.check_prefetch_progress(handle):
                    self.cache.pop_prefetch_loaded_tokens(handle)
                    commits = [e for e in self.env.trace.events() if e.kind is EventKind.COMMIT and e.op == request_id]
                    finished[request_id] = int(commits[-1].value) if commits else 0
        return finished

    def settle_acks(self) -> None:
        """Wait until upstream's sync thread has forwarded every ACK that every rank's IO thread has queued.

        A step's ACK drain then sees every batch that has landed on every rank
        (the order the harness's gates define), deterministically. The sync
        thread reduces one ACK at a time across ranks, so on each rank it
        forwards exactly as many ACKs as the rank that queued fewest has
        queued: the harness agrees that count (a MIN of its own, on the
        scheduler's thread, where every rank runs it at the same call) and
        waits for it. Every rank calls this at the same points of a scenario.
        """
        taps, acks = self.taps, self.acks
        with taps.io_done:
            queued = acks.queued
        agreed = self.drive.min_over_ranks(queued)
        with taps.io_done:
            settled = taps.io_done.wait_for(lambda: acks.forwarded >= agreed, self.env.wait_timeout_s)
        if not settled:
            raise AssertionError(f"L4: sglang-live: upstream's prefetch sync thread forwarded {acks.forwarded} of the {agreed} ACK(s) "
                                 f"every rank queued within {self.env.wait_timeout_s}s ({self.storage_threads.state()})")

    def abort(self, request_id: str) -> None:
        with self.taps.scheduling(op=request_id, phase="abort"):
            self.cache.release_aborted_request(self.handle(request_id))

    def loaded_slots(self, tokens: Sequence[int]) -> tuple[Any, torch.Tensor]:
        """init_load_back with the scheduler's Req, start_loading, then the next step's loading_check."""
        m = self.runtime.modules
        match = self._node_hit(tokens)
        if int(match.host_hit_length):
            req = m["schedule_batch"].Req("load-back", "", array("q", tokens), m["sampling_params"].SamplingParams(max_new_tokens=1))
            req.last_node = match.last_device_node
            self.cache.init_load_back(m["base_prefix_cache"].InitLoadBackParams(
                best_match_node=match.best_match_node, host_hit_length=int(match.host_hit_length), req=req))
            self.cache.ready_to_load_host_cache()
        self.cache.check_hicache_events()
        match = self._node_hit(tokens)
        return match, self.cache.path_device_indices(match.last_device_node)

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
        operation = self.runtime.module("hybrid_cache_controller").PrefetchOperation(self.handle(probes.PROBE_ID), [0] * (state.hit_pages * ps))
        operation.hash_value = [f"probe-{i}" for i in range(state.hit_pages)]
        operation.storage_hit_count = operation.stats_requested_tokens = state.hit_pages * ps
        # The drain allocates host slots only for a hit: with none, the operation has none (upstream revokes it there).
        operation.host_indices = torch.arange(state.hit_pages * ps) if state.hit_pages else None
        operation.completed_tokens = state.completed_tokens
        operation.start_time = start_time
        if state.pool_transfers_present:
            operation.pool_transfers = ["mamba"]  # read for presence only by the decision
            operation.pool_transfers_done = state.pool_transfers_done
        self.cache._storage_prefetch_wait.pop(operation.handle, None)
        self.cache._start_storage_prefetch_wait(operation)
        wait = self.cache._storage_prefetch_wait.get(operation.handle)
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

    def evict_all(self) -> None:
        self.settle_acks()
        super().evict_all()

    def close(self) -> None:
        """The scheduler's steps until every prefetch's IO has ended and its ACKs and releases are drained, then upstream's shutdown."""
        if self._closed:
            return
        cc, taps, acks = self.cc, self.taps, self.acks
        try:
            self.pump(lambda: taps.started_ops <= taps.ended_ops and acks.queued == acks.forwarded
                      and cc.ack_prefetch_queue.empty() and cc.host_mem_release_queue.empty(),
                      "every prefetch's IO to end and its ACKs to be drained before shutdown")
        finally:
            super().close()
