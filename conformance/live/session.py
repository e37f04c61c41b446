"""What every live session shares: configuration as a user sets it, the scheduler's calls, observation.

A session is one upstream cache instance for one test, behind the
CacheUnderTest protocol. It drives upstream the way its scheduler does
(insert, check_hicache_events then check_prefetch_progress per step,
prefetch_from_storage, release_aborted_request, init_load_back then
start_loading) and records the trace through taps.py. What differs per
class (its pools, how a request's data enters the tree, what a load-back
reads) is in the subclasses: hiradix.py, hi_mamba.py.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import threading
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import pytest
import torch

from conformance.adapter import CacheEnv, Loaded, PoolLayout
from conformance.live import shims
from conformance.live.runtime import Runtime, ensure_process_group
from conformance.live.taps import KV, Taps, tensor_digest
from spec.decision import DecisionState
from spec.errors import ConfigError
from spec.fence import HitPolicy
from spec.timeout import is_timed_out, timeout_budget
from spec.trace import EventKind

LAYERS, HEADS, HEAD_DIM = 2, 1, 4
DTYPE = torch.float32  # per token: k and v, per layer, HEADS x head size
# CacheEnv.kv_format -> (KV dtype, head size): the page format another server of the same model could store.
KV_FORMATS = {"default": (DTYPE, HEAD_DIM), "dtype": (torch.bfloat16, HEAD_DIM), "layout": (DTYPE, HEAD_DIM // 2)}
UPSTREAM_THREADS = ("prefetch_thread", "backup_thread", "prefetch_io_aux_thread")
THREAD_EXIT_S = 5.0  # how long a storage thread may take to end after an exception left its step


def server_args_fields(env: CacheEnv, host_ratio: float) -> dict[str, Any]:
    """The ServerArgs fields a user sets for this environment (hicache_* and the storage backend's extra config)."""
    t = env.termination
    extra = {
        "prefetch_threshold": env.threshold_pages * t.page_size,
        "prefetch_timeout_base": t.timeout_base_s,
        "prefetch_timeout_per_ki_token": t.timeout_per_ki_token_s,
        "prefetch_timeout_max": t.timeout_max_s,
    }
    return dict(
        device="cpu", page_size=t.page_size,
        enable_hierarchical_cache=True, hicache_ratio=host_ratio, hicache_size=0,
        hicache_io_backend="direct", hicache_mem_layout="layer_first",
        hicache_write_policy=env.write_policy, hicache_storage_backend="file",
        hicache_storage_prefetch_policy=t.policy.value,
        hicache_storage_backend_extra_config=json.dumps(extra),
    )


def server_args(runtime: Runtime, env: CacheEnv, host_ratio: float) -> Any:
    return shims.server_args_without_model(runtime.server_args_cls, model_path="conformance-live", **server_args_fields(env, host_ratio))


# Spec-named termination fields -> where a user of upstream sets them.
CLI_FIELDS = {"policy": "--hicache-storage-prefetch-policy", "page_size": "--page-size"}
EXTRA_CONFIG_FIELDS = {"timeout_base_s": "prefetch_timeout_base", "timeout_per_ki_token_s": "prefetch_timeout_per_ki_token",
                       "timeout_max_s": "prefetch_timeout_max"}


def configure_through(runtime: Runtime, fields: Mapping[str, Any], parse_extra_config: Callable[[Any, str], Any]) -> None:
    """Validate the fields through upstream's own entry points: its CLI parser and the class's extra-config parser.

    An unknown field lands in the extra config, as a user's misspelt key would.
    Upstream's own error becomes a one-line ValueError, its words unchanged.
    """
    argv = ["--model-path", "conformance-live"]
    extra: dict[str, Any] = {}
    for name, value in fields.items():
        if name in CLI_FIELDS:
            argv += [CLI_FIELDS[name], str(value)]
        else:
            extra[EXTRA_CONFIG_FIELDS.get(name, name)] = value
    parser = argparse.ArgumentParser(exit_on_error=False)
    runtime.server_args_cls.add_cli_args(parser)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            parser.parse_args(argv)
        parse_extra_config(None, json.dumps(extra))
    except (argparse.ArgumentError, SystemExit, ValueError, TypeError) as exc:
        raise ValueError(" ".join(str(exc).split())) from None


class LiveSession:
    """One upstream cache instance for one test; subclasses build it (build) and say how data enters and leaves it."""

    CLASS_NAME = ""
    THREADS = UPSTREAM_THREADS  # upstream's storage threads, by attribute of its controller

    def __init__(self, runtime: Runtime, env: CacheEnv) -> None:
        self.runtime = runtime
        self.env = env
        ps = env.page_size
        # Upstream requires more host than device memory (HostKVCache asserts it): the device
        # tier gets one page less than the host tier. A test that shrinks the host tier below
        # the device tier would leave no room to load its host tier back.
        if env.host_pages < env.device_pages:
            pytest.skip(f"upstream's {self.CLASS_NAME} needs more host than device memory; a {env.host_pages}-page host tier "
                        f"leaves a device tier too small to load it back")
        self.device_pages = env.host_pages - 1
        self.dtype, self.head_dim = KV_FORMATS[env.kv_format]
        m = runtime.modules
        storage = Path(env.storage_dir)
        storage.mkdir(parents=True, exist_ok=True)
        os.environ["SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"] = str(storage)
        # host slots = (int(device * ratio) // page_size + 1) * page_size: aim at exactly env.host_pages pages
        ratio = ((env.host_pages - 1) * ps + 0.5) / (self.device_pages * ps)
        self.group, self.args = self.configure_runtime(ratio)
        runtime.clock.clock = env.clock
        shims.set_storage_batch_pages(m["cache_controller"], env.batch_pages)
        self.taps = self.make_taps()
        self.cache = self.build()
        self.cache.load_back_threshold = ps  # the load-back-threshold shim
        self.cc = self.cache.cache_controller
        self.backend = self.cc.storage_backend
        self.pools: dict[str, PoolLayout] = {KV: PoolLayout(KV, "token", (2, LAYERS, HEADS, self.head_dim), self.dtype, HitPolicy.ALL_PAGES)}
        self.install_taps()
        self.observe()
        self._acked = threading.Condition()
        self._tap_backup_acks()
        self._closed = False
        self._deaths: list[str] | None = None

    def configure_runtime(self, host_ratio: float) -> tuple[Any, Any]:
        """Join upstream's process group and set its server args as a user would: (TP cpu group, ServerArgs)."""
        group = ensure_process_group(self.runtime, self.env.rank, self.env.world_size)
        args = server_args(self.runtime, self.env, host_ratio)
        self.runtime.modules["server_args"].set_global_server_args_for_scheduler(args)
        return group, args

    def make_taps(self) -> Taps:
        return Taps(self.env.trace, self.env.termination, self.env.page_size)

    # --- what a subclass provides ---------------------------------------------------------------

    def build(self) -> Any:
        """Build upstream's device pools, allocator and cache; set self.device_pool, self.allocator, self.kv_host."""
        raise NotImplementedError

    def install_taps(self) -> None:
        """Record the trace from this cache's objects (taps.py)."""
        self.taps.tap_host_pool(self.kv_host, KV)
        self.taps.tap_controller(self.cc)
        self.taps.tap_storage(self.backend, self.storage_file_name)
        self.taps.tap_cache(self.cache, self.decision_state)

    def observe(self) -> None:
        """Further taps (extra pools, collectives outside the cache's own methods)."""

    def write(self, tokens: Sequence[int], data: Mapping[str, torch.Tensor]) -> None:
        """A plain KV write, as the scheduler caches a request: device slots, then insert (a prefix the tree holds is freed)."""
        __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
        aligned = len(tokens) - len(tokens) % self.env.page_size
        if aligned == 0:
            return
        slots = self._alloc_device(aligned)
        self._write_kv_rows(slots, data[KV][:aligned])
        m = self.runtime.modules
        result = self.cache.insert(m["base_prefix_cache"].InsertParams(key=self.radix_key(tokens[:aligned]), value=slots))
        if result.prefix_len:
            self.allocator.free(slots[: result.prefix_len])  # the tree already held that prefix (as upstream's scheduler frees it)

    def evict_params(self) -> Any:
        return self.runtime.modules["base_prefix_cache"].EvictParams(num_tokens=1 << 30)

    def evict_host_all(self) -> None:
        self.cache.evict_host(1 << 30)

    def needs_load(self, match: Any) -> bool:
        return bool(match.host_hit_length)

    def loaded_extra(self, match: Any) -> dict[str, torch.Tensor]:
        """Extra pools' device bytes for the match just loaded back (state pools: [1, *elem])."""
        return {}

    def record_extra_load_back(self, match: Any) -> None:
        """LOAD_BACK events (key, digest) for extra-pool host data about to be copied to the device."""

    def probe_operation(self, transfers_present: bool) -> tuple[type, list | None]:
        """The operation class a decision probe is made of, and the pool transfers it carries when present."""
        hybrid = self.runtime.modules.get("hybrid_cache_controller")
        if not transfers_present or hybrid is None:
            return self.runtime.modules["cache_controller"].PrefetchOperation, None
        storage = self.runtime.modules["hicache_storage"]
        return hybrid.PrefetchOperation, [storage.PoolTransfer(name=storage.PoolName.INDEXER, hit_policy=storage.PoolHitPolicy.ALL_PAGES,
                                                               indices_from_pool=storage.PoolName.KV)]

    def extra_accounting(self) -> dict[str, tuple[int, int, int]]:
        return {}

    # --- helpers -----------------------------------------------------------------------------

    def mha_device_tier(self) -> Any:
        """Upstream's MHA device KV pool (CPU), its paged allocator and a request pool: (device pool, allocator, request pool)."""
        m, ps, pages = self.runtime.modules, self.env.page_size, self.device_pages
        device_pool = m["memory_pool"].MHATokenToKVPool(
            size=pages * ps, page_size=ps, dtype=self.dtype, head_num=HEADS, head_dim=self.head_dim,
            layer_num=LAYERS, device="cpu", enable_memory_saver=False)
        allocator = m["allocator"].PagedTokenToKVPoolAllocator(pages * ps, ps, self.dtype, "cpu", device_pool, need_sort=False)
        req_pool = m["memory_pool"].ReqToTokenPool(size=2, max_context_len=4096, device="cpu", enable_memory_saver=False)
        return device_pool, allocator, req_pool

    def storage_file_name(self, key: str) -> str:
        return f"{self.backend._get_suffixed_key(key)}.bin"

    def decision_state(self, operation: Any) -> DecisionState | None:
        t = self.env.termination
        hit = len(operation.hash_value)
        try:
            return DecisionState(
                policy=t.policy, page_size=t.page_size, hit_pages=hit, completed_tokens=int(operation.completed_tokens),
                timed_out=is_timed_out(float(operation.start_time), self.env.clock.now(), timeout_budget(t, hit)),
                pool_transfers_present=bool(getattr(operation, "pool_transfers", None)),
                pool_transfers_done=bool(getattr(operation, "pool_transfers_done", True)),
                terminated=bool(operation.is_terminated()),
            )
        except ConfigError:
            return None  # a state outside the spec's space (recorded as a vote without a state)

    def _tap_backup_acks(self) -> None:
        queue = self.cc.ack_backup_queue
        put = queue.put

        def acked(item: Any, *args: Any, **kwargs: Any) -> Any:
            result = put(item, *args, **kwargs)
            with self._acked:
                self._acked.notify_all()
            return result

        queue.put = acked

    def radix_key(self, tokens: Sequence[int]) -> Any:
        return self.runtime.modules["radix_cache"].RadixKey(list(tokens))

    def _node_hit(self, tokens: Sequence[int]) -> Any:
        return self.cache.match_prefix(self.runtime.modules["base_prefix_cache"].MatchPrefixParams(key=self.radix_key(tokens)))

    def _alloc_device(self, tokens: int) -> torch.Tensor:
        __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
        slots = self.allocator.alloc(tokens)
        if slots is None:
            self.cache.evict(self.runtime.modules["base_prefix_cache"].EvictParams(num_tokens=tokens))
            slots = self.allocator.alloc(tokens)
        if slots is None:
            raise AssertionError(f"sglang-live: no device room for {tokens} tokens after eviction")
        return slots

    def _write_kv_rows(self, slots: torch.Tensor, rows: torch.Tensor) -> None:
        for layer in range(LAYERS):
            self.device_pool.k_buffer[layer][slots] = rows[:, 0, layer].to(self.dtype)
            self.device_pool.v_buffer[layer][slots] = rows[:, 1, layer].to(self.dtype)

    def _any_rank(self, flag: bool) -> bool:
        """The harness's own agreement (not upstream's, not recorded): whether `flag` holds on some rank."""
        if self.env.world_size == 1:
            return flag
        import torch.distributed as dist

        agreed = torch.tensor([int(flag)], dtype=torch.int)
        dist.all_reduce(agreed, op=dist.ReduceOp.MAX, group=self.group)
        return bool(agreed.item())

    def _alive(self, name: str) -> bool:
        thread = getattr(self.cc, name, None)
        return thread is not None and thread.is_alive()

    # --- the protocol ----------------------------------------------------------------------------

    def flush(self) -> None:
        # Upstream's scheduler calls check_hicache_events once per step on every rank (each call runs
        # collectives), so every rank takes the same rounds here: until no rank has a backup pending.
        __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
        for _ in range(200):  # bounded: 200 rounds of at most wait_timeout_s / 200 each
            self.cache.check_hicache_events()
            if not self._any_rank(bool(self.cache.ongoing_write_through or self.cache.ongoing_backup)):
                return
            with self._acked:
                self._acked.wait(self.env.wait_timeout_s / 200)
        dead = self.background_errors()
        if dead:
            raise AssertionError(f"sglang-live flush: backups still pending after {self.env.wait_timeout_s}s: " + "; ".join(dead))
        raise AssertionError(
            f"L4: sglang-live flush: backups still pending after {self.env.wait_timeout_s}s "
            f"(write-through {len(self.cache.ongoing_write_through)}, storage {len(self.cache.ongoing_backup)}; "
            f"backup thread alive: {self._alive('backup_thread')}): a started transfer never ended")

    def evict_all(self) -> None:
        __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
        self.cache.check_hicache_events()
        self.cache.evict(self.evict_params())
        self.evict_host_all()

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
                f"({self.threads_state()})")

    def threads_state(self) -> str:
        """Which of upstream's storage threads are alive, and what ended the IO thread: for a message naming what hung."""
        alive = ", ".join(f"{name} alive: {self._alive(name)}" for name in self.THREADS)
        return f"{alive}; IO thread errors: {'; '.join(self.taps.io_thread_errors) or 'none'}"

    def check_progress(self, request_ids: Sequence[str]) -> dict[str, int]:
        __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
        finished: dict[str, int] = {}
        with self.taps.scheduler_step() as step:
            self.cache.check_hicache_events()
            for request_id in request_ids:
                if self.cache.check_prefetch_progress(request_id):
                    self.cache.pop_prefetch_loaded_tokens(request_id)
                    commits = [e for e in self.env.trace.events() if e.kind is EventKind.COMMIT and e.op == request_id and e.step == step]
                    finished[request_id] = int(commits[-1].value) if commits else 0
        return finished

    def abort(self, request_id: str) -> None:
        __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
        with self.taps.scheduling(op=request_id, phase="abort"):
            self.cache.release_aborted_request(request_id)

    def load_back(self, tokens: Sequence[int]) -> Loaded:
        __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
        match, slots = self.loaded_slots(tokens)
        rows = torch.stack([torch.stack([self.device_pool.k_buffer[l][slots] for l in range(LAYERS)], 1),
                            torch.stack([self.device_pool.v_buffer[l][slots] for l in range(LAYERS)], 1)], 1)
        return Loaded(tokens=len(slots), data={KV: rows.clone(), **self.loaded_extra(match)})

    def loaded_slots(self, tokens: Sequence[int]) -> tuple[Any, torch.Tensor]:
        """Load the host part of the tokens' prefix back to the device: (the match after it, the device slots of the prefix)."""
        __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
        m = self._node_hit(tokens)
        if self.needs_load(m):
            self._load_host_part(m)
        # loading_check releases the load's node locks. Every rank runs it (its collectives), loaded or not.
        self.cache.check_hicache_events()
        m = self._node_hit(tokens)
        return m, m.device_indices

    def _load_host_part(self, m: Any) -> None:
        __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
        nodes, node = [], m.best_match_node
        while node.evicted:
            nodes.insert(0, node)
            node = node.parent
        keys, digests, host_slots = [], [], []
        ps = self.env.page_size
        for n in nodes:
            host = n.host_value.tolist()
            for page, key in enumerate(n.hash_value or []):
                keys.append(self.storage_file_name(key))
                digests.append(tensor_digest(self.kv_host.get_data_page(host[page * ps], flat=True)))
                host_slots.append(host[page * ps])
        self.record_extra_load_back(m)
        params = self.runtime.modules["base_prefix_cache"].InitLoadBackParams(best_match_node=m.best_match_node, host_hit_length=int(m.host_hit_length))
        loaded, _ = self.cache.init_load_back(params)
        if len(loaded) and keys:
            self.env.trace.record(EventKind.LOAD_BACK, pool=KV, slots=host_slots, keys=keys, digests=digests)
        self.cache.ready_to_load_host_cache()

    def make_operation(self, state: DecisionState, *, start_time: float) -> Any:
        operation_cls, pool_transfers = self.probe_operation(state.pool_transfers_present)
        kwargs = {"pool_transfers": pool_transfers} if pool_transfers is not None else {}
        operation = operation_cls("decision-probe", self.kv_host.get_dummy_flat_data_page()[:0], [0] * (state.hit_pages * state.page_size), **kwargs)
        if state.pool_transfers_present and pool_transfers is None:
            operation.pool_transfers = ["indexer"]  # upstream reads both fields with getattr
        if state.pool_transfers_present:
            operation.pool_transfers_done = state.pool_transfers_done
        operation.hash_value = [f"probe-{i}" for i in range(state.hit_pages)]
        operation.completed_tokens = state.completed_tokens
        operation.start_time = start_time
        if state.terminated:
            operation.mark_terminate()
        return operation

    def can_terminate(self, operation: Any) -> bool:
        return bool(self.cache.can_terminate_prefetch(operation))

    def slot_accounting(self) -> Mapping[str, tuple[int, int, int]]:
        host_free = self.kv_host.available_size()
        device_free = self.allocator.available_size()
        device_size = self.allocator.size
        return {"host:kv": (self.kv_host.size - host_free, host_free, self.kv_host.size),
                "device:kv": (device_size - device_free, device_free, device_size), **self.extra_accounting()}

    def threads(self) -> Sequence[threading.Thread]:
        return [t for t in (getattr(self.cc, n, None) for n in self.THREADS) if t is not None]

    def background_errors(self) -> list[str]:
        """L5: each of upstream's storage threads that an exception ended while the cache was open (one line each).

        A thread whose loop catches the error and goes on is fine; one whose
        loop catches only queue.Empty dies, and every later transfer of this
        cache stalls behind it.
        """
        if self._deaths is None:
            return self._thread_deaths()
        return list(self._deaths)

    def _thread_deaths(self) -> list[str]:
        by_ident = {t.ident: name for name in self.THREADS if (t := getattr(self.cc, name, None)) is not None}
        out = []
        for ident, error in list(self.taps.thread_errors):
            name = by_ident.get(ident)
            thread = getattr(self.cc, name, None) if name else None
            if thread is None:
                continue
            # The exception is on its way out of the thread's loop: bounded, and at once when the thread ends
            # (a loop that catches it keeps the thread alive, and it is no death).
            thread.join(min(THREAD_EXIT_S, self.env.wait_timeout_s))
            if not thread.is_alive():
                out.append(f"L5: upstream's {name} ended on {error}; its loop catches only queue.Empty, so no later transfer of this cache runs")
        return list(dict.fromkeys(out))

    def close(self) -> None:
        __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
        if self._closed:
            return
        self._closed = True
        try:
            self._settle_before_shutdown()
        finally:
            self._deaths = self._thread_deaths()  # before shutdown ends every thread
            self.cache.shutdown()  # upstream's own detach: stops and joins its storage threads

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
        taps = self.taps
        with taps.io_done:
            taps.io_done.wait_for(lambda: taps.started_ops <= taps.ended_ops, self.env.wait_timeout_s)
        self.cache.check_hicache_events()
