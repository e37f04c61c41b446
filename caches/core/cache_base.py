"""HierarchicalCache: one cache wired from the shared core's parts.

Three tiers (device, host, storage), one paged radix tree, pools that travel
with KV, real background threads. The parts, each in a file named for what
it does:

- slot accounting (slots.py): one allocator per tier and slot group;
- the tree (tree.py, tree_node.py): the prefix index;
- eviction (eviction.py): which nodes may leave a tier, what their slots become;
- the write path (write_path.py): device data in, backups to host and storage;
- the prefetch path (prefetch_path.py): start, track and end prefetches;
- the storage controller (controller.py): the prefetch, IO and backup threads;
- the commit (commit.py): what a terminated prefetch inserts, through the fence;
- the scheduler step (scheduler_step.py): check_prefetch_progress's loop;
- load-back (load_back.py): host pages of a match back to the device;
- hooks (hooks.py): what each concrete cache does differently.

Each concrete cache (caches/hiradix.py, caches/unified_radix.py,
caches/hi_mamba_radix.py) owns only `can_terminate_prefetch`, the protocol
code the conformance suite guards, and chooses its hooks.

Only the scheduler thread calls the public methods; background threads reach
the cache through operations, queues and callbacks. Every public method first
refuses a closed cache (CacheClosedError) and a cache whose background thread
failed (BackgroundError), then checks its arguments, before it allocates anything.
"""

from __future__ import annotations

import threading
from typing import Any, ClassVar, Mapping, Sequence

import torch

from caches.config import CacheConfig
from caches.core.arguments import checked_count, checked_request_id, checked_request_ids
from caches.core.assembly import build_pools, build_reducers, check_extra_pools, open_storage, slot_groups
from caches.core.process_groups import build_group_reducers
from caches.core.commit import PrefetchCommit
from caches.core.controller import StorageController
from caches.core.copies import CopyTracker
from caches.core.copy_engine import CopyEngine
from caches.core.eviction import Eviction
from caches.core.hooks import CacheHooks
from caches.core.load_back import LoadBackPath
from caches.core.operation import PrefetchOperation
from caches.core.parts import CoreParts
from caches.core.prefetch_path import PrefetchPath
from caches.core.probe import probe_operation
from caches.core.scheduler_step import SchedulerStep
from caches.core.slots import KV_GROUP, STATE_GROUP, SlotAccounting
from caches.core.state import StateRef, node_states
from caches.core.stats import CacheStats
from caches.core.tree import InsertResult, MatchResult, RadixTree, TreeNode
from caches.core.write_path import BackupAcks, WritePath
from caches.errors import BackgroundError, CacheClosedError, CacheTimeoutError
from caches.storage import StorageBackend
from caches.storage.namespace import StorageNamespace
from spec.clock import Clock, MonotonicClock
from spec.decision import DecisionState
from spec.errors import ConfigError
from spec.groups import ATTENTION_RULE
from spec.trace import NullRecorder, TraceRecorder

__all__ = ["CacheStats", "HierarchicalCache", "KV_GROUP", "STATE_GROUP", "StateRef"]


class HierarchicalCache:
    name: ClassVar[str] = "hierarchical"
    supported_extra_pools: ClassVar[frozenset[str]] = frozenset()
    required_extra_pools: ClassVar[frozenset[str]] = frozenset()
    # The parts a variant may swap (caches/variants/ replaces the fence, the operation, the prefetch and write paths).
    commit_class: ClassVar[type[PrefetchCommit]] = PrefetchCommit
    operation_class: ClassVar[type[PrefetchOperation]] = PrefetchOperation
    prefetch_path_class: ClassVar[type[PrefetchPath]] = PrefetchPath
    write_path_class: ClassVar[type[WritePath]] = WritePath
    # Which of several process groups the collectives run on (spec/groups.py, X2): upstream's attention rule.
    vote_group_rule: ClassVar[str] = ATTENTION_RULE
    controller_class: ClassVar[type[StorageController]] = StorageController
    copies_class: ClassVar[type[CopyTracker]] = CopyTracker  # a variant's copy tracker (which copies keep a slot busy: F9)

    def __init__(
        self,
        config: CacheConfig,
        *,
        trace: TraceRecorder | None = None,
        clock: Clock | None = None,
        process_group: Any = None,
        process_groups: Any = None,
        storage: StorageBackend | None = None,
    ) -> None:
        if not isinstance(config, CacheConfig):
            raise ConfigError("config", type(config).__name__, "a caches.config.CacheConfig")
        check_extra_pools(self.name, self.supported_extra_pools, self.required_extra_pools, config)
        # What the decision code reads (each cache's can_terminate_prefetch, upstream's through the shim).
        self.config = config
        self.page_size = config.page_size
        self.termination = config.termination
        self.prefetch_stop_policy = self.termination.policy.value
        self.clock: Clock = clock if clock is not None else MonotonicClock()
        self.trace: TraceRecorder = trace if trace is not None else NullRecorder()
        self.device = torch.device(config.device)
        if process_groups is not None:  # several vote groups (tp, attn_tp, attn_cp), reduced over as upstream does
            if process_group is not None:
                raise ConfigError("process_groups", "given with process_group", "one of process_group (one group) or process_groups (several)")
            self.reducer, hit_reducer, self._own_groups = build_group_reducers(process_groups, self.vote_group_rule, self.device, self.trace)
        else:
            self.reducer, hit_reducer, self._own_groups = build_reducers(process_group, self.device, self.trace)
        self.rank = self.reducer.rank
        self.world_size = self.reducer.world_size
        who = f"{self.name} rank {self.rank}"

        # Memory: pools on both tiers, slot accounting over them, the copies between tiers.
        pools = build_pools(config, self.device)
        self.specs, self.device_pools, self.host_pools = pools.specs, pools.device, pools.host
        self.token_pools, self.state_pools, self.window_pools = pools.token_pools, pools.state_pools, pools.window_pools
        self.slots = SlotAccounting(self.name, slot_groups(config, pools), self.trace)
        # Storage first: a bad storage_path is refused before any thread starts.
        self.storage_namespace = self.namespace_of(config)
        # An injected backend is the caller's: it chooses its own namespace.
        self.storage = storage if storage is not None else open_storage(config, self.storage_namespace)
        # On CPU, copies run on a worker thread playing the copy stream, so that a
        # trace gate can hold one (the harness's races). Untraced, nothing can hold
        # or observe a pending copy: they run at once in the caller, which is one of
        # the orders the stream allows and saves two thread hand-offs per copy.
        self.copy_engine = CopyEngine(self.device, cpu_stream=self.trace.enabled)
        self.copies = self.copies_class(self.copy_engine, self.trace, self.slots.release, config.wait_timeout_s, units=self.slots.units())
        self.tree = RadixTree(self.page_size, on_split=self._on_split, device=self.device)
        self.hooks = self.make_hooks()

        # The threads that move pages to and from storage.
        self.stats = CacheStats()
        acks = BackupAcks(self.reducer)
        self.controller = self.controller_class(
            name=f"{self.name}-r{self.rank}", storage=self.storage, host_pools=self.host_pools, page_size=self.page_size,
            trace=self.trace, hit_reducer=hit_reducer, batch_pages=config.storage_batch_pages,
            threshold_pages=config.prefetch_threshold_pages, on_backup_done=acks.arrived,
        )

        # The paths, sharing the parts above.
        parts = CoreParts(who, config, self.tree, self.slots, self.copies, pools, self.trace, self.clock, self.hooks, self.stats)
        self.write_path = self.write_path_class(parts, reducer=self.reducer, acks=acks, submit_backup=self.controller.submit_backup)
        write_back = config.write_policy == "write_back"
        self.eviction = Eviction(
            parts, writing=self.write_path.writing, before_device_eviction=self.write_path.back_up_before_evict if write_back else None,
        )
        self.slots.bind(settle=self._settle_copies, make_room=self.eviction.make_room)
        self.prefetches = self.prefetch_path_class(parts, reducer=self.reducer, submit=self.controller.submit_prefetch, operation_class=self.operation_class)
        self.commit = self.commit_class(parts, reducer=self.reducer, prefetches=self.prefetches)
        self.scheduler = SchedulerStep(
            termination=self.termination, trace=self.trace, clock=self.clock, reducer=self.reducer, copies=self.copies,
            prefetches=self.prefetches, commit=self.commit, trailing_pools=len(pools.trailing_pools),
        )
        self.load_back_path = LoadBackPath(parts, eviction=self.eviction)
        self._closed = False
        self._threads_outlived_close = False  # close() raised: a later close() finishes it

    def make_hooks(self) -> CacheHooks:
        """This cache's hooks (caches/core/hooks.py); built once the tree and the copies exist."""
        return CacheHooks()

    def _on_split(self, head: TreeNode, tail: TreeNode) -> None:
        # Splits happen only inside calls on a built cache: every part exists by then.
        self.write_path.on_split(head, tail)
        self.hooks.on_split(head, tail)

    def _settle_copies(self) -> bool:
        """Run frees that wait on copies (thread-timed) so every rank decides on the same state; True if any."""
        if not self.copies.pending_count():
            return False
        self.copies.wait()
        return True

    # --- the scheduler's calls --------------------------------------------------------

    def write(self, tokens: Sequence[int], data: Mapping[str, torch.Tensor]) -> InsertResult | None:
        self._ensure_usable("write")
        return self.write_path.write(tokens, data)

    def insert(self, tokens: Sequence[int], device_slots: torch.Tensor, *, states: Mapping[str, int] | None = None) -> InsertResult:
        self._ensure_usable("insert")
        return self.write_path.insert(tokens, device_slots, states=states)

    def match_prefix(self, tokens: Sequence[int]) -> MatchResult:
        self._ensure_usable("match_prefix")
        return self.write_path.match(tokens)

    def prefetch_from_storage(self, request_id: str, tokens: Sequence[int]) -> int:
        """Queue a prefetch (caches/core/prefetch_path.py); returns the tokens requested, 0 when none."""
        self._ensure_usable("prefetch_from_storage")
        return self.prefetches.start(request_id, tokens)

    def check_prefetch_progress(self, request_ids: Sequence[str]) -> dict[str, int]:
        """One scheduler step over the agreed, ordered request ids; {id: committed tokens} of those finished."""
        self._ensure_usable("check_prefetch_progress")
        return self.scheduler.check(checked_request_ids(request_ids), self.can_terminate_prefetch)

    def release_aborted_request(self, request_id: str) -> None:
        """The request is gone: stop its prefetch and return every slot (F8)."""
        self._ensure_usable("release_aborted_request")
        self.prefetches.abort(checked_request_id(request_id))

    def wait_prefetch_io(self, request_id: str) -> None:
        """Bounded wait until the IO thread starts nothing more for this prefetch."""
        self._ensure_usable("wait_prefetch_io")
        self.prefetches.wait_io(request_id)

    def load_back(self, node: TreeNode, quota_tokens: int | None = None) -> torch.Tensor | None:
        self._ensure_usable("load_back")
        return self.load_back_path.load_back(node, quota_tokens)

    def read_device(self, device_slots: torch.Tensor, *, state_node: TreeNode | None = None) -> dict[str, torch.Tensor]:
        self._ensure_usable("read_device")
        return self.load_back_path.read_device(device_slots, state_node=state_node)

    def writing_check(self) -> None:
        """Apply finished backups, in counts every rank agrees on."""
        self._ensure_usable("writing_check")
        self.write_path.writing_check()

    def flush(self) -> None:
        """Wait (bounded) until every backup begun so far reached host and storage."""
        self._ensure_usable("flush")
        self.write_path.flush()

    def evict(self, num_tokens: int) -> int:
        """Free at least `num_tokens` device tokens if possible, least recently used first; returns tokens evicted."""
        self._ensure_usable("evict")
        return self.eviction.evict(checked_count("num_tokens", num_tokens))

    def evict_host(self, num_tokens: int) -> int:
        """Free at least `num_tokens` host tokens if possible (storage keeps its pages); returns tokens evicted."""
        self._ensure_usable("evict_host")
        return self.eviction.evict_host(checked_count("num_tokens", num_tokens))

    def evict_all(self) -> None:
        """Empty the device and host tiers (storage keeps its pages)."""
        self._ensure_usable("evict_all")
        self.write_path.flush()
        self.eviction.evict(self.tree.device_tokens())
        # write_back backs nodes up on their way off the device: the host tier can
        # let them go only once those backups reached storage (a backup pins its host pages).
        self.write_path.flush()
        self.eviction.evict_host(self.tree.host_tokens())
        self.copies.wait()

    # --- what the decision code uses -------------------------------------------------------

    def can_terminate_prefetch(self, operation: Any) -> bool:  # pragma: no cover - each cache's own
        raise NotImplementedError

    @property
    def _step(self) -> int:
        """The scheduler step in progress (collectives carry it)."""
        return self.scheduler.step

    def _record_vote(self, op: PrefetchOperation, progress: Any, vote: bool, timed_out: bool) -> None:
        self.scheduler.record_vote(op, progress, vote, timed_out)

    def make_probe_operation(self, state: DecisionState, *, start_time: float) -> PrefetchOperation:
        """A real operation placed in `state`, for probing can_terminate_prefetch (never registered, owns no slots)."""
        return probe_operation(state, page_size=self.page_size, start_time=start_time)

    # --- inspection -------------------------------------------------------------------------

    @property
    def ongoing_prefetch(self) -> dict[str, PrefetchOperation]:
        return self.prefetches.ongoing

    @property
    def prefetch_tokens_occupied(self) -> int:
        return self.prefetches.tokens_occupied

    def states(self, node: TreeNode) -> dict[str, StateRef]:
        return node_states(node)

    def slot_accounting(self) -> dict[str, tuple[int, int, int]]:
        """(allocated, free, capacity) per tier and slot group; allocated + free == capacity."""
        return self.slots.accounting()

    def background_errors(self) -> list[str]:
        """Unexpected exceptions on this cache's background threads (bugs, not storage faults), one line each."""
        return [failure.describe() for failure in self.controller.failure_list()]

    def threads(self) -> list[threading.Thread]:
        return [*self.controller.threads, *self.copy_engine.threads]

    # --- lifecycle ------------------------------------------------------------------------

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

    def namespace_of(self, config: CacheConfig) -> StorageNamespace:
        """Whose pages this cache may read: every format field of its pools, the page size and the ranks (S6)."""
        return StorageNamespace.of(model_name=config.model_name, page_size=config.page_size, specs=self.specs,
                                   world_size=self.world_size, rank=self.rank)

    def close(self) -> None:
        """Stop every thread this cache started; raises naming any that did not stop.

        A thread that did not stop may still be inside a storage call or a
        collective: the storage and the process groups stay open for it (closed
        under it, its read would fail as a misuse), and the next close() finishes
        the job. Background failures do not make close() raise: they were raised
        by the scheduler call after them and stay listed in background_errors().
        """
        if self._closed and not self._threads_outlived_close:
            return
        if not self._closed:
            self._closed = True
            self.prefetches.abort_all()
        errors = []
        for stop in (self.controller.close, self.copy_engine.close):
            try:
                stop(self.config.wait_timeout_s)
            except TimeoutError as exc:
                errors.append(str(exc))
        self.prefetches.drain_after_close()
        self.copies.poll()
        self._threads_outlived_close = bool(errors)
        if errors:
            raise CacheTimeoutError("; ".join(errors))
        self.storage.close()
        if self._own_groups:
            import torch.distributed as dist

            for group in self._own_groups:
                dist.destroy_process_group(group)
            self._own_groups = []

    def __enter__(self) -> "HierarchicalCache":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
