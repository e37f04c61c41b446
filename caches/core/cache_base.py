"""HierarchicalCache: the machinery every cache shares.

Three tiers (device, host, storage), one paged radix tree, pools that travel
with KV, real background threads. Each concrete cache (caches/hiradix.py,
caches/unified_radix.py, caches/hi_mamba_radix.py) owns its
`can_terminate_prefetch` and `check_prefetch_progress`, the protocol code the
conformance suite guards; everything else lives here, once.

Pools: "kv" is primary; token pools with `shares_kv_slots` (the indexer) use
the KV slot numbers in buffers of their own (allocator group "kv"); state
pools (mamba) hold one slot per tree node, at the node's end (group "state").

Only the scheduler thread calls the public methods; background threads reach
the cache through operations, queues and callbacks. Every public method first
refuses a closed cache (CacheClosedError) and a cache whose background thread
failed (BackgroundError), then checks its arguments, before it allocates anything.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

import torch

from caches.config import CacheConfig
from caches.core.agreed_queue import AgreedQueue
from caches.core.arguments import checked_request_id
from caches.core.allocator import PageAllocator
from caches.core.controller import BackupJob, StorageController
from caches.core.copies import CopyTracker
from caches.core.copy_engine import CopyEngine
from caches.core.load_back import LoadBackPath
from caches.core.operation import PoolPlan, PrefetchOperation
from caches.core.pools import PoolSet, PoolSpec
from caches.core.prefetch_path import PrefetchPath
from caches.core.reducer import LocalReducer, Reducer, TorchDistReducer
from caches.core.state import StateRef
from caches.core.tree import RadixTree, TreeNode
from caches.core.write_path import WritePath
from caches.errors import BackgroundError, CacheArgumentError, CacheClosedError, CacheTimeoutError
from caches.storage import FileStorage, MemoryStorage, StorageBackend, StorageConfigError
from caches.storage.namespace import StorageNamespace
from spec.clock import Clock, MonotonicClock
from spec.decision import DecisionState
from spec.errors import ConfigError
from spec.fence import HitPolicy
from spec.trace import DEVICE, HOST, EventKind, NullRecorder, TraceRecorder

KV_GROUP = "kv"
STATE_GROUP = "state"


@dataclass
class CacheStats:
    storage_hit_tokens: int = 0  # committed by prefetches: a hit is reported only for loaded data (F8)
    prefetches_started: int = 0
    prefetches_committed: int = 0
    loaded_back_tokens: int = 0


class HierarchicalCache(WritePath, PrefetchPath, LoadBackPath):
    name: ClassVar[str] = "hierarchical"
    supported_extra_pools: ClassVar[frozenset[str]] = frozenset()
    required_extra_pools: ClassVar[frozenset[str]] = frozenset()

    def __init__(
        self,
        config: CacheConfig,
        *,
        trace: TraceRecorder | None = None,
        clock: Clock | None = None,
        process_group: Any = None,
        storage: StorageBackend | None = None,
    ) -> None:
        if not isinstance(config, CacheConfig):
            raise ConfigError("config", type(config).__name__, "a caches.config.CacheConfig")
        self._check_pools(config)
        self.config = config
        self.page_size = config.page_size
        self.termination = config.termination
        self.prefetch_stop_policy = self.termination.policy.value
        self.clock: Clock = clock if clock is not None else MonotonicClock()
        self.trace: TraceRecorder = trace if trace is not None else NullRecorder()
        self.device = torch.device(config.device)
        self.specs = self._pool_specs(config)
        self.token_pools = [s.name for s in self.specs if s.unit == "token"]
        self.state_pools = [s.name for s in self.specs if s.unit == "state"]
        self.device_pools = PoolSet.device(self.specs, self._sizes(config, DEVICE), self.device)
        self.host_pools = PoolSet.host(self.specs, self._sizes(config, HOST), self.device)
        self.allocators: dict[tuple[str, str], PageAllocator] = {
            (DEVICE, KV_GROUP): PageAllocator(config.device_pages, self.page_size, name=f"{self.name} device kv"),
            (HOST, KV_GROUP): PageAllocator(config.host_pages, self.page_size, name=f"{self.name} host kv"),
        }
        if self.state_pools:
            self.allocators[(DEVICE, STATE_GROUP)] = PageAllocator(config.state_device_slots, 1, name=f"{self.name} device state")
            self.allocators[(HOST, STATE_GROUP)] = PageAllocator(config.state_host_slots, 1, name=f"{self.name} host state")
        self.reducer, hit_reducer = self._reducers(process_group)
        self.rank = self.reducer.rank
        self.world_size = self.reducer.world_size
        self.storage_namespace = StorageNamespace.of(
            model_name=config.model_name, dtype=config.dtype, page_size=config.page_size, specs=self.specs,
            world_size=self.world_size, rank=self.rank,
        )
        # An injected backend is the caller's: it chooses its own namespace.
        self.storage = storage if storage is not None else self._open_storage(config)
        self.copy_engine = CopyEngine(self.device, cpu_stream=True)
        self.copies = CopyTracker(
            self.copy_engine, self.trace, self._free_slots, config.wait_timeout_s, units={KV_GROUP: self.page_size, STATE_GROUP: 1}
        )
        self.tree = RadixTree(self.page_size, on_split=self._on_split, device=self.device)
        self.ongoing_prefetch: dict[str, Any] = {}
        self._draining: list[PrefetchOperation] = []  # ended, with IO still in flight
        self.prefetch_tokens_occupied = 0
        self.stats = CacheStats()
        self._step = 0
        self._pending_writes: list[Any] = []
        self._backups_in_flight = 0
        self._backup_cv = threading.Condition()
        self.backup_acks: AgreedQueue[BackupJob] = AgreedQueue(self.reducer, "backup_ack")
        self.controller = StorageController(
            name=f"{self.name}-r{self.rank}",
            storage=self.storage,
            host_pools=self.host_pools,
            page_size=self.page_size,
            trace=self.trace,
            hit_reducer=hit_reducer,
            batch_pages=config.storage_batch_pages,
            threshold_pages=config.prefetch_threshold_pages,
            on_backup_done=self._backup_done,
        )
        self._closed = False

    # --- construction helpers -------------------------------------------------

    @classmethod
    def _check_pools(cls, config: CacheConfig) -> None:
        pools = set(config.extra_pools)
        unsupported = pools - cls.supported_extra_pools
        if unsupported:
            accepted = ", ".join(sorted(cls.supported_extra_pools)) or "none"
            raise ConfigError("extra_pools", sorted(unsupported), f"{cls.name} supports extra pools: {accepted}")
        missing = cls.required_extra_pools - pools
        if missing:
            raise ConfigError("extra_pools", sorted(pools), f"{cls.name} needs extra pools: {', '.join(sorted(cls.required_extra_pools))}")

    def _pool_specs(self, config: CacheConfig) -> list[PoolSpec]:
        dtype = config.torch_dtype
        specs = [PoolSpec.kv(config.kv_elem_shape, dtype)]
        if "indexer" in config.extra_pools:
            specs.append(PoolSpec.indexer(config.indexer_elem_shape, dtype))
        if "mamba" in config.extra_pools:
            specs.append(PoolSpec.mamba(config.state_elem_shape, dtype))
        return specs

    def _sizes(self, config: CacheConfig, space: str) -> dict[str, int]:
        tokens = (config.device_pages if space == DEVICE else config.host_pages) * self.page_size
        states = config.state_device_slots if space == DEVICE else config.state_host_slots
        return {s.name: (states if s.unit == "state" else tokens) for s in self.specs}

    def _reducers(self, process_group: Any) -> tuple[Reducer, Reducer]:
        self._own_groups: list[Any] = []
        if process_group is None:
            return LocalReducer(), LocalReducer()
        import torch.distributed as dist

        backend = dist.get_backend(process_group)
        device = self.device if backend == "nccl" else torch.device("cpu")
        # The prefetch thread gets a group of its own: collectives from two
        # threads on one group would interleave differently on each rank.
        hit_group = dist.new_group(ranks=dist.get_process_group_ranks(process_group), backend=backend)
        self._own_groups = [hit_group]  # destroyed at close
        return (
            TorchDistReducer(process_group, self.trace, device=device),
            TorchDistReducer(hit_group, self.trace, device=device),
        )

    def _open_storage(self, config: CacheConfig) -> StorageBackend:
        if config.storage_backend == "memory":
            return MemoryStorage()  # private to this cache: nothing else can read or write it
        # One folder per namespace (caches/storage/namespace.py); each rank stores its own shard of every page.
        namespace = self.storage_namespace
        try:
            return FileStorage(namespace.rank_root(config.storage_path), namespace=namespace.tag)
        except OSError as exc:
            raise ConfigError("storage_path", config.storage_path, f"a writable directory ({config.storage_path} is unusable: {exc})") from None
        except StorageConfigError as exc:
            raise ConfigError("storage_path", config.storage_path, f"a writable directory ({exc})") from None

    # --- slots ---------------------------------------------------------------

    def group_of(self, pool: str) -> str:
        return STATE_GROUP if pool in self.state_pools else KV_GROUP

    def pools_of(self, group: str) -> list[str]:
        return list(self.state_pools) if group == STATE_GROUP else list(self.token_pools)

    def _alloc(self, space: str, group: str, count: int, *, op: str | None = None) -> torch.Tensor | None:
        """Allocate, evicting from that tier once if needed; None when it cannot fit.

        Records one ALLOC per pool living in these slot numbers, owned by `op`
        (a prefetch) or, with op None, bound for the tree.
        """
        allocator = self.allocators[(space, group)]
        slots = allocator.alloc(count)
        if slots is None and self.copies.pending_count():
            # Frees waiting on copies finish at thread-timed moments: settle them so
            # every rank decides whether to evict on the same state.
            self.copies.wait()
            slots = allocator.alloc(count)
        if slots is None:
            short = count - allocator.free_slots()
            if space == DEVICE:
                self._evict(short if group == KV_GROUP else self.page_size)
            else:
                self._evict_host_for(group, short)
            self.copies.wait()
            slots = allocator.alloc(count)
        if slots is not None and self.trace.enabled:
            for pool in self.pools_of(group):
                self.trace.record(EventKind.ALLOC, op=op, pool=pool, space=space, slots=slots)
        return slots

    def _evict_host_for(self, group: str, short: int) -> None:
        self._evict_host(short if group == KV_GROUP else self.page_size)

    def _free_slots(self, space: str, group: str, slots: list[int]) -> None:
        self.allocators[(space, group)].free(slots)

    def _free_host_from_op(self, group: str, slots: list[int]) -> None:
        # Called by PrefetchOperation.drain(), on the scheduler thread only.
        self.allocators[(HOST, group)].free(slots)

    def states(self, node: TreeNode) -> dict[str, StateRef]:
        return node.ext.setdefault("states", {})

    # --- splitting: pending writes follow their nodes ---------------------------

    def _on_split(self, head: TreeNode, tail: TreeNode) -> None:
        pending = tail.ext.get("pending_write")
        if pending is not None:
            pending.split(head, tail)

    # --- accounting and lifecycle ------------------------------------------------

    def slot_accounting(self) -> dict[str, tuple[int, int, int]]:
        """(allocated, free, capacity) per tier and slot group; allocated + free == capacity."""
        return {
            f"{space}:{group}": (a.allocated_slots(), a.free_slots(), a.capacity_slots)
            for (space, group), a in self.allocators.items()
        }

    def _ensure_usable(self, call: str) -> None:
        """Refuse a closed cache, and raise a background thread's bug at the first call after it."""
        if self._closed:
            raise CacheClosedError(f"{self.name} rank {self.rank} is closed: {call}() after close()")
        failures = self.controller.failure_list()
        if failures:
            first = failures[0]
            more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
            raise BackgroundError(
                f"{self.name} rank {self.rank}: {call}() refused: {first.describe()}{more}; "
                "this is a bug in the cache, not a storage fault: close() it"
            ) from first.error

    @property
    def closed(self) -> bool:
        return self._closed

    def background_errors(self) -> list[str]:
        """Unexpected exceptions on this cache's background threads (bugs, not storage faults), one line each."""
        return [failure.describe() for failure in self.controller.failure_list()]

    def wait_prefetch_io(self, request_id: str) -> None:
        """Bounded wait until the IO thread starts nothing more for this prefetch."""
        self._ensure_usable("wait_prefetch_io")
        checked_request_id(request_id)
        op = self.ongoing_prefetch.get(request_id)
        if op is None:
            raise CacheArgumentError("request_id", request_id, "the id of a prefetch in flight: " + (", ".join(sorted(self.ongoing_prefetch)) or "none"))
        if not op.io_done.wait(self.config.wait_timeout_s):
            raise CacheTimeoutError(f"{self.name} rank {self.rank}: IO of prefetch {request_id} not done within {self.config.wait_timeout_s}s")

    def threads(self) -> list[threading.Thread]:
        return [*self.controller.threads, *self.copy_engine.threads]

    def close(self) -> None:
        """Stop every thread this cache started; raises naming any that did not stop.

        Background failures do not make close() raise: they were raised by the
        scheduler call after them and stay listed in background_errors().
        """
        if self._closed:
            return
        self._closed = True
        for request_id in list(self.ongoing_prefetch):
            self._abort_prefetch(request_id)
        errors = []
        for stop in (self.controller.close, self.copy_engine.close):
            try:
                stop(self.config.wait_timeout_s)
            except TimeoutError as exc:
                errors.append(str(exc))
        # The threads are gone, so no IO is in flight: free what is left, locally.
        for op in self._draining:
            op.drain()
        self._draining = []
        self.copies.poll()
        self.storage.close()
        if self._own_groups:
            import torch.distributed as dist

            for group in self._own_groups:
                dist.destroy_process_group(group)
            self._own_groups = []
        if errors:
            raise CacheTimeoutError("; ".join(errors))

    def __enter__(self) -> "HierarchicalCache":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def make_probe_operation(self, state: DecisionState, *, start_time: float) -> PrefetchOperation:
        """A real operation placed in `state`, for probing can_terminate_prefetch.

        It is not registered as ongoing and never commits, so its slot numbers
        are not taken from the allocators.
        """
        pages = max(state.hit_pages, 1)
        hashes = _probe_hashes(pages)
        slots = torch.arange(pages * self.page_size, dtype=torch.int64)
        extras = []
        if state.pool_transfers_present:
            extras.append(PoolPlan("indexer", HitPolicy.ALL_PAGES, slots, "kv"))

        def never_freed(group: str, freed: list[int]) -> None:
            raise RuntimeError("a probe operation owns no allocated slots")

        op = PrefetchOperation(
            "probe", requested_hashes=hashes, kv=PoolPlan("kv", HitPolicy.ALL_PAGES, slots, "kv"), extras=extras,
            page_size=self.page_size, start_time=start_time, trace=NullRecorder(), free_slots=never_freed,
        )
        op.hash_value = hashes[: state.hit_pages]
        op.completed_tokens = state.completed_tokens
        op.pool_transfers_done = state.pool_transfers_done
        if state.terminated:
            op.mark_terminate()
        return op

    # --- what each cache owns ---------------------------------------------------

    def can_terminate_prefetch(self, operation: Any) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    def check_prefetch_progress(self, request_ids: Sequence[str]) -> dict[str, int]:  # pragma: no cover - abstract
        raise NotImplementedError


def _probe_hashes(pages: int) -> list[str]:
    from caches.core.hashing import page_hashes

    return page_hashes(list(range(pages)), 1)
