"""A live session: one upstream cache instance for one test, composed of the seams, behind the CacheUnderTest protocol.

It drives upstream the way the fork's scheduler does (insert,
check_hicache_events then check_prefetch_progress per step,
prefetch_from_storage, release_aborted_request, init_load_back then
start_loading) and records the trace through the taps. The seams:
configuration.py (ServerArgs as a user sets them), tiers.py (device pools
and a request's rows), scheduler.py (steps on every rank alike),
threads.py (upstream's storage threads), taps/ (recording), sidecar.py
(each extra pool). A layout's session (conformance/live/layouts/<name>/session.py)
builds its cache and names its sidecars; the 0.5.2x layout also drives its
own scheduler protocol.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch

from conformance.adapter import CacheEnv, Loaded
from conformance.live.abort_paths import DEFAULT_CALLS, RECEIVED, AbortPath
from conformance.live import calls, configuration, evidence, probes, shims
from conformance.live.runtime import Runtime, ensure_process_group
from conformance.live.scheduler import Drive
from conformance.live.sidecar import Sidecar
from conformance.live.taps import KV, Taps, tensor_digest
from conformance.live.taps.cache import tap_barrier, tap_fork_cache
from conformance.live.taps.controller import tap_fork_controller
from conformance.live.taps.host import tap_host_pool
from conformance.live.taps.storage import tap_storage
from conformance.live.threads import FORK_THREADS, StorageThreads
from conformance.live.tiers import Rows, accounting
from spec.decision import DecisionState
from spec.trace import EventKind


class LiveSession:
    """One upstream cache instance for one test; a layout's subclass builds it (build) and names its sidecars."""

    CLASS_NAME = ""
    THREADS = FORK_THREADS  # upstream's storage threads, by attribute of its controller

    # What build() sets: the device rows of KV, the device allocator, the KV host pool.
    kv: Rows
    allocator: Any
    kv_host: Any

    def __init__(self, runtime: Runtime, env: CacheEnv) -> None:
        self.runtime = runtime
        self.env = env
        ps = env.page_size
        # Upstream requires more host than device memory (HostKVCache asserts it): the device tier gets one page less
        # than the host tier. A test asking for less host room than device room gets the host room it asks for as upstream
        # meets it in service: a host tier larger than the device's, the rest held by other requests' data (held_host).
        room = max(env.host_pages, env.device_pages)
        self.device_pages = room - 1
        host_total = room + self.prefetch_headroom_pages()
        storage = Path(env.storage_dir)
        storage.mkdir(parents=True, exist_ok=True)
        os.environ["SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"] = str(storage)
        self.group, self.args = self.configure(configuration.host_ratio(host_total, self.device_pages, ps))
        runtime.clock.clock = env.clock
        shims.set_storage_batch_pages(runtime.modules["cache_controller"], env.batch_pages)
        self.taps = Taps(env.trace, env.termination, ps)
        # A class that fixes its prefetch timeout times out by it, whatever is configured: its votes saw that budget.
        self.fixed_budget_s = evidence.fixed_timeout_of(runtime.tree, self.CLASS_NAME)[0] if self.CLASS_NAME else None
        self.sidecars: list[Sidecar] = []
        self.cache = self.build()
        self.cache.load_back_threshold = ps  # the load-back-threshold shim
        if self.CLASS_NAME in runtime.fixed_thresholds:
            shims.set_prefetch_threshold(self.cache, env.threshold_pages * ps)
        self.dropped: set[str] = set()  # aborted requests the tree's scheduler checks no more (no release, or a path that releases none)
        self.abort_paths: Mapping[str, AbortPath] = {}  # the tree's scheduler abort paths (the live adapter sets them)
        self.cc = self.cache.cache_controller
        self.backend = self.cc.storage_backend
        self.held_host = held_host_room(self.kv_host, (host_total - env.host_pages) * ps)
        self.pools = {KV: self.kv.layout, **{s.name: s.layout for s in self.sidecars}}
        self.drive = Drive(env, self.group)
        self.storage_threads = StorageThreads(self.cc, self.THREADS, self.taps, env.wait_timeout_s)
        self.tap()
        for sidecar in self.sidecars:
            sidecar.tap(self.taps)
        self._acked = threading.Condition()
        self._tap_backup_acks()
        self._closed = False
        self._deaths: list[str] | None = None

    # --- what a layout's session provides ---------------------------------------------------------

    def configure(self, host_ratio: float) -> tuple[Any, Any]:
        """Join upstream's process group and set its server args as a user would: (TP cpu group, ServerArgs)."""
        group = ensure_process_group(self.runtime, self.env.rank, self.env.world_size)
        args = configuration.server_args_without_model(self.runtime, self.env, host_ratio, self.mem_layout())
        publish = getattr(self.runtime.modules["server_args"], "set_global_server_args_for_scheduler", None)
        if publish is not None:  # older trees hand the cache its settings as arguments instead
            publish(args)
        return group, args

    def prefetch_headroom_pages(self) -> int:
        """Host pages beyond the device tier's and the test's, held as other requests' data (a layout whose prefetch cap
        is a share of host minus device room overrides it)."""
        return 0

    def mem_layout(self) -> str:
        """The host memory layout the build runs with (a layout whose code demands another overrides it)."""
        return "layer_first"

    def build(self) -> Any:
        """Build upstream's device tier and cache; set self.kv, self.allocator, self.kv_host and self.sidecars."""
        raise NotImplementedError

    def tap(self) -> None:
        """Record the trace from the fork's objects (taps/)."""
        tap_host_pool(self.taps, self.kv_host, KV)
        tap_fork_controller(self.taps, self.cc)
        tap_storage(self.taps, self.backend, self.storage_file_name)
        tap_fork_cache(self.taps, self.cache, self.decision_state)
        if hasattr(self.cache, "_barrier_attn_groups"):
            tap_barrier(self.taps, self.cache, "_barrier_attn_groups")

    # --- requests ----------------------------------------------------------------------------------

    def radix_key(self, tokens: Sequence[int]) -> Any:
        return calls.radix_key(self.runtime, tokens)

    def _node_hit(self, tokens: Sequence[int]) -> Any:
        return calls.match(self.runtime, self.cache, self.radix_key(tokens))

    def storage_file_name(self, key: str) -> str:
        return f"{self.backend._get_suffixed_key(key)}.bin"

    def _alloc_device(self, tokens: int) -> torch.Tensor:
        __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
        slots = self.allocator.alloc(tokens)
        if slots is None:
            calls.evict(self.runtime, self.cache, tokens)
            slots = self.allocator.alloc(tokens)
        if slots is None:
            raise AssertionError(f"sglang-live: no device room for {tokens} tokens after eviction")
        return slots

    def _evict_fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = {}
        for sidecar in self.sidecars:
            fields.update(sidecar.evict_fields())
        return fields

    def _tap_backup_acks(self) -> None:
        queue = self.cc.ack_backup_queue
        put = queue.put

        def acked(item: Any, *args: Any, **kwargs: Any) -> Any:
            result = put(item, *args, **kwargs)
            with self._acked:
                self._acked.notify_all()
            return result

        queue.put = acked

    # --- the protocol ------------------------------------------------------------------------------

    def write(self, tokens: Sequence[int], data: Mapping[str, torch.Tensor]) -> None:
        """A request's rows, as the scheduler caches a request: device slots, then insert (a prefix the tree holds is freed)."""
        __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
        aligned = len(tokens) - len(tokens) % self.env.page_size
        if aligned == 0:
            return
        slots = self._alloc_device(aligned)
        self.kv.write(slots, data[KV][:aligned])
        for sidecar in self.sidecars:
            sidecar.stage(slots, {name: rows[:aligned] for name, rows in data.items()})
        prefix_len = calls.insert(self.runtime, self.cache, self.radix_key(tokens[:aligned]), slots)
        if prefix_len:
            self.allocator.free(slots[:prefix_len])  # the tree already held that prefix (as upstream's scheduler frees it)

    def flush(self) -> None:
        """Every rank takes the same scheduler steps, until no rank has a backup pending (bounded)."""
        __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one

        def waiting(timeout_s: float) -> None:
            with self._acked:
                self._acked.wait(timeout_s)

        if self.drive.steps_until_settled(self.cache.check_hicache_events,
                                          lambda: bool(self.cache.ongoing_write_through or self.cache.ongoing_backup), waiting):
            return
        dead = self.background_errors()
        if dead:
            raise AssertionError(f"sglang-live flush: backups still pending after {self.env.wait_timeout_s}s: " + "; ".join(dead))
        raise AssertionError(
            f"L4: sglang-live flush: backups still pending after {self.env.wait_timeout_s}s "
            f"(write-through {len(self.cache.ongoing_write_through)}, storage {len(self.cache.ongoing_backup)}; "
            f"backup thread alive: {self.storage_threads.alive('backup_thread')}): a started transfer never ended")

    def evict_all(self) -> None:
        __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
        self.cache.check_hicache_events()
        calls.evict(self.runtime, self.cache, 1 << 30, **self._evict_fields())
        self.cache.evict_host(1 << 30)
        for sidecar in self.sidecars:
            sidecar.evict_host()

    def match(self, tokens: Sequence[int]) -> tuple[int, int]:
        m = self._node_hit(tokens)
        return len(m.device_indices), int(m.host_hit_length)

    def prefetch(self, request_id: str, tokens: Sequence[int]) -> int:
        __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
        m = self._node_hit(tokens)
        matched = len(m.device_indices) + int(m.host_hit_length)
        node = m.last_host_node
        with self.taps.scheduling(op=request_id, phase="prefetch"):
            self.cache.prefetch_from_storage(request_id, node, list(tokens[matched:]), last_hash=node.get_last_hash_value())
        entry = self.cache.ongoing_prefetch.get(request_id)
        return len(entry[1]) if entry is not None else 0

    def wait_prefetch_io(self, request_id: str) -> None:
        __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
        if not self.taps.wait_io_done(request_id, self.env.wait_timeout_s):
            raise AssertionError(
                f"L4: sglang-live: upstream's prefetch threads did not finish the IO of {request_id} within {self.env.wait_timeout_s}s "
                f"({self.storage_threads.state()})")

    def check_progress(self, request_ids: Sequence[str]) -> dict[str, int]:
        __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
        finished: dict[str, int] = {}
        with self.taps.scheduler_step() as step:
            self.cache.check_hicache_events()
            for request_id in request_ids:
                if request_id in self.dropped:
                    continue  # the tree's scheduler dropped the aborted request: it checks nothing of it again
                if self.cache.check_prefetch_progress(request_id):
                    calls.pop_loaded_tokens(self.cache, request_id)
                    commits = [e for e in self.env.trace.events() if e.kind is EventKind.COMMIT and e.op == request_id and e.step == step]
                    finished[request_id] = int(commits[-1].value) if commits else 0
        return finished

    def abort(self, request_id: str) -> None:
        __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
        with self.taps.scheduling(op=request_id, phase="abort"):
            if not calls.release_aborted(self.cache, request_id):
                self.dropped.add(request_id)

    def abort_by(self, request_id: str, path: str) -> None:
        """The waiting request dropped by one of the tree's scheduler paths: the cache call that path makes, or none."""
        __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
        call = self.abort_paths[path].call_on(self.cache)
        received = self.abort_paths.get(RECEIVED)
        if call is not None and (call in DEFAULT_CALLS or (received is not None and call == received.call_on(self.cache))):
            self.abort(request_id)  # the call abort() makes for an abort the scheduler received
            return
        with self.taps.scheduling(op=request_id, phase="abort"):
            if call is not None:
                self.call_on_abort(call, request_id)
            self.dropped.add(request_id)  # out of the waiting queue: the scheduler checks nothing of it again

    def call_on_abort(self, method: str, request_id: str) -> None:
        """Another call than abort()'s, as the scheduler makes it on a dropped request (by its request id)."""
        getattr(self.cache, method)(request_id)

    def load_back(self, tokens: Sequence[int]) -> Loaded:
        __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
        match, slots = self.loaded_slots(tokens)
        data = {KV: self.kv.read(slots).clone()}
        for sidecar in self.sidecars:
            rows = sidecar.loaded(match, slots)
            if rows is not None:
                data[sidecar.name] = rows.clone()
        return Loaded(tokens=len(slots), data=data)

    def loaded_slots(self, tokens: Sequence[int]) -> tuple[Any, torch.Tensor]:
        """Load the host part of the tokens' prefix back to the device: (the match after it, the device slots of the prefix)."""
        __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
        m = self._node_hit(tokens)
        if bool(m.host_hit_length) or any(s.has_host_hit(m) for s in self.sidecars):
            self._load_host_part(m)
        # loading_check releases the load's node locks. Every rank runs it (its collectives), loaded or not.
        self.cache.check_hicache_events()
        m = self._node_hit(tokens)
        return m, m.device_indices

    def _load_host_part(self, m: Any) -> None:
        __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
        nodes, node = [], calls.best_match_node(m)
        while node.evicted:
            nodes.insert(0, node)
            node = node.parent
        ps = self.env.page_size
        pages = [(n.host_value.tolist()[page * ps], key) for n in nodes for page, key in enumerate(n.hash_value or [])]
        keys = [self.storage_file_name(key) for _, key in pages]
        digests = [tensor_digest(calls.data_page(self.kv_host, slot)) for slot, _ in pages]
        for sidecar in self.sidecars:
            if not sidecar.rides_kv_slots:
                sidecar.record_load_back(m, pages)
        loaded = calls.init_load_back(self.runtime, self.cache, m)
        if len(loaded) and keys:
            self.env.trace.record(EventKind.LOAD_BACK, pool=KV, slots=[slot for slot, _ in pages], keys=keys, digests=digests)
            for sidecar in self.sidecars:
                if sidecar.rides_kv_slots:
                    sidecar.record_load_back(m, pages)
        self.cache.ready_to_load_host_cache()

    # --- decision probes (probes.py) -----------------------------------------------------------------

    def decision_state(self, operation: Any) -> DecisionState | None:
        return probes.decision_state(self.env, operation, self.fixed_budget_s)

    def make_operation(self, state: DecisionState, *, start_time: float) -> Any:
        transfer = self.sidecars[0].probe_transfer() if self.sidecars else None
        return probes.fork_operation(self.runtime, self.kv_host, state, start_time, transfer)

    def can_terminate(self, operation: Any) -> bool:
        return bool(self.cache.can_terminate_prefetch(operation))

    # --- accounting, threads, teardown ----------------------------------------------------------------

    def slot_accounting(self) -> Mapping[str, tuple[int, int, int]]:
        allocated, free, capacity = accounting(self.kv_host)
        held = len(self.held_host)  # other requests' data: neither this test's nor free
        out = {"host:kv": (allocated - held, free, capacity - held), "device:kv": accounting(self.allocator)}
        for sidecar in self.sidecars:
            out.update(sidecar.accounting())
        return out

    def threads(self) -> Sequence[threading.Thread]:
        return self.storage_threads.threads()

    def background_errors(self) -> list[str]:
        """L5: each of upstream's storage threads that an exception ended while the cache was open (one line each)."""
        if self._deaths is None:
            return self.storage_threads.deaths()
        return list(self._deaths)

    def background_errors_now(self) -> list[str]:
        """background_errors() without waiting for a thread an exception is still leaving (for a hang detector)."""
        return self.storage_threads.deaths(wait_s=0.0) if self._deaths is None else list(self._deaths)

    def close(self) -> None:
        __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
        if self._closed:
            return
        self._closed = True
        try:
            self._settle_before_shutdown()
        finally:
            self._deaths = self.storage_threads.deaths()  # before shutdown ends every thread
            self.shutdown()

    def shutdown(self) -> None:
        """Upstream's own detach: stops and joins its storage threads."""
        calls.shutdown(self.cache, self.env.wait_timeout_s)

    def _settle_before_shutdown(self) -> None:
        """One rank: let every started prefetch's IO end (bounded), then one scheduler step drains what it released.

        Shutting down while an IO thread still finishes a released operation
        would strand the slots it releases in a queue nobody drains: a leak
        the trace would blame on upstream only under load. Several ranks: a
        step runs collectives, and a rank may close while its peers are
        elsewhere, so they shut down as they are.
        """
        if self.env.world_size != 1:
            return
        self.taps.wait_all_io_done(self.env.wait_timeout_s)
        self.cache.check_hicache_events()


def held_host_room(kv_host: Any, tokens: int) -> torch.Tensor:
    """Host slots taken before the test, standing for other requests' data the tree cannot evict (pinned by their own
    prefetches and backups): what leaves upstream's allocator short of room, so a prefetch takes its degraded path.
    Taken before the taps, so the trace and the accounting of the test never see them."""
    if tokens <= 0:
        return torch.empty(0, dtype=torch.int64)
    slots = kv_host.alloc(tokens)
    if slots is None:
        raise AssertionError(f"sglang-live: the host tier of {kv_host.size} slots could not hold {tokens} slots of other requests' data")
    return slots
