"""Record the spec's trace from upstream's real objects, by wrapping their methods at run time.

Every wrapper calls the original; none changes what it does. Where an event
happens (which upstream method, which thread) is listed in TAP_POINTS and in
docs/upstream.md. The harness's gate is consulted after each IO start, outside
upstream's locks, exactly where upstream then calls its storage backend or its
copy: a hold parks that thread there, an injected fault is raised there, as a
storage error would be.

Scheduler-side context (which operation, which step, which collective) is
kept per thread: upstream's scheduler calls are made by the test's thread,
IO by upstream's own threads.
"""

from __future__ import annotations

import copy
import functools
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import torch

from conformance.live import collectives
from spec.config import TerminationConfig
from spec.decision import VOTE_COLLECTIVE, DecisionState
from spec.fence import COMMIT_COLLECTIVE
from spec.trace import BACKUP, HOST, LOAD, LOAD_BACK_COPY, WRITE_BACK_COPY, EventKind, TraceRecorder, page_digest

KV = "kv"
TREE = "tree"  # owner of host slots held by the radix tree

TAP_POINTS = (
    ("op_start", "cache_controller.prefetch_queue.put (the operation is queued)"),
    ("alloc / free", "alloc / free of each host pool (KV, and the mamba state pool), owner: the operation in scheduler context, else the tree"),
    ("hit, io_done", "cache_controller._page_transfer entry, and the IO thread's release of the unused tail after it (io_done)"),
    ("revoke", "cache_controller.prefetch_revoke_queue.put (prefetch thread), release_aborted_request (abort)"),
    ("io_start / io_end (load)", "cache_controller.page_get_func around each storage batch (IO thread); the gate sits before the storage call"),
    ("io_start / io_end (backup)", "cache_controller.page_set_func around each storage batch (backup thread)"),
    ("io_start / io_end (extra pools)", "storage_backend.batch_get_v2 (IO thread, after the KV batches) and batch_set_v2 (backup thread), one IO per pool transfer"),
    ("page_write", "storage_backend.set (the page's file name is its key; a key '<hash>.<pool>' is that pool's page)"),
    ("io_start / io_end (copies)", "cache_controller.start_writing / start_loading (device<->host copies)"),
    ("vote, collective", "HiRadixCache._all_reduce_attn_groups, or torch.distributed.all_reduce as HiMambaRadixCache calls it, inside can_terminate_prefetch; "
                         "without a reduce (best_effort; one rank of HiMambaRadixCache) the vote is recorded at the return"),
    ("collective (barrier)", "HiRadixCache._barrier_attn_groups, or torch.distributed.barrier as HiMambaRadixCache calls it (release_aborted_request)"),
    ("terminate", "cache_controller.terminate_prefetch inside check_prefetch_progress"),
    ("commit, insert", "_insert_helper_host inside check_prefetch_progress (and the mamba state it attaches to the new leaf)"),
)


class Context(threading.local):
    op: str | None = None
    step: int | None = None
    phase: str | None = None
    voted: bool = False
    transferring: str | None = None  # the operation whose storage IO this (IO) thread runs
    inserting: str | None = None  # the operation whose commit inserts into the tree now


def tensor_digest(tensor: Any) -> str:
    """page_digest of a tensor's bytes (a page as upstream's backend stores it, or as its host pool holds it)."""
    return page_digest(tensor.contiguous().view(-1).view(torch.uint8).numpy().tobytes())


def wrap(obj: Any, name: str, make: Callable[[Callable], Callable]) -> None:
    """Replace obj.name (an instance attribute shadowing a method, or a queue's put) by make(original)."""
    original = getattr(obj, name)
    wrapper = make(original)
    functools.update_wrapper(wrapper, original)
    setattr(obj, name, wrapper)


class Taps:
    """The recording side of one live cache instance."""

    def __init__(self, trace: TraceRecorder, termination: TerminationConfig, page_size: int) -> None:
        self.trace = trace
        self.termination = termination
        self.page_size = page_size
        self.ctx = Context()
        self.owner: dict[tuple[str, int], str] = {}  # (pool, host slot) -> operation id or TREE
        self.pools: set[str] = set()  # the pools whose host slots are tapped
        self.io_done = threading.Condition()
        self.started_ops: set[str] = set()
        self.ended_ops: set[str] = set()
        self.io_thread_errors: list[str] = []
        # (thread ident, what it raised): exceptions that left one of upstream's storage-thread bodies (L5 if the thread then died)
        self.thread_errors: list[tuple[int, str]] = []
        self.step = 0

    # --- context ----------------------------------------------------------------------

    @contextmanager
    def scheduling(self, *, op: str | None = None, phase: str | None = None) -> Iterator[None]:
        saved = (self.ctx.op, self.ctx.phase)
        self.ctx.op = op if op is not None else self.ctx.op
        self.ctx.phase = phase if phase is not None else self.ctx.phase
        try:
            with collectives.active(self):
                yield
        finally:
            self.ctx.op, self.ctx.phase = saved

    @contextmanager
    def scheduler_step(self) -> Iterator[int]:
        """One scheduler check: events inside carry its step; outside it (writes, probes) they carry none."""
        self.step += 1
        self.ctx.step = self.step
        self.trace.record(EventKind.STEP, step=self.step)
        try:
            yield self.step
        finally:
            self.ctx.step = None

    # --- waiting on the IO thread -----------------------------------------------------------

    def _io_finished(self, op: str) -> None:
        self.trace.record(EventKind.IO_DONE, op=op)
        with self.io_done:
            self.ended_ops.add(op)
            self.io_done.notify_all()

    def wait_io_done(self, op: str, timeout_s: float) -> bool:
        """True once upstream's threads start no more IO for op; at once when op was never queued."""
        with self.io_done:
            return self.io_done.wait_for(lambda: op in self.ended_ops or op not in self.started_ops, timeout_s)

    # --- host slots ---------------------------------------------------------------------------

    def tap_host_pool(self, pool: Any, name: str = KV) -> None:
        """alloc/free of one host pool (`name`: the pool its slots belong to)."""
        self.pools.add(name)

        def alloc(original: Callable) -> Callable:
            def wrapper(need_size: int, *args: Any, **kwargs: Any) -> Any:
                slots = original(need_size, *args, **kwargs)
                if slots is not None:
                    owner = self.ctx.op if self.ctx.phase == "prefetch" else None
                    self.trace.record(EventKind.ALLOC, op=owner, pool=name, space=HOST, slots=slots)
                    for s in slots.tolist():
                        self.owner[(name, s)] = owner or TREE
                return slots
            return wrapper

        def free(original: Callable) -> Callable:
            def wrapper(indices: Any, *args: Any, **kwargs: Any) -> Any:
                by_owner: dict[str, list[int]] = {}
                for s in indices.tolist():
                    by_owner.setdefault(self.owner.pop((name, s), TREE), []).append(s)
                    self.forget_slot(name, s)
                for owner, slots in by_owner.items():
                    self.trace.record(EventKind.FREE, op=None if owner == TREE else owner, pool=name, space=HOST, slots=slots)
                return original(indices, *args, **kwargs)
            return wrapper

        wrap(pool, "alloc", alloc)
        wrap(pool, "free", free)

    def forget_slot(self, pool: str, slot: int) -> None:
        """A freed host slot's contents are gone (subclasses that remember them forget here)."""

    def tap_attach(self, lru_list: Any, pool: str, value_attr: str) -> None:
        """A state attached to a new leaf by a commit: the leaf enters `lru_list` inside _insert_helper_host."""
        def attached(original: Callable) -> Callable:
            def wrapper(node: Any, *args: Any, **kwargs: Any) -> Any:
                op = self.ctx.inserting
                value = getattr(node, value_attr, None)
                if op is not None and value is not None:
                    slots = value.tolist()
                    self.trace.record(EventKind.INSERT, op=op, pool=pool, space=HOST, slots=slots)
                    for s in slots:
                        self.owner[(pool, s)] = TREE
                return original(node, *args, **kwargs)
            return wrapper

        wrap(lru_list, "insert_mru", attached)

    # --- the controller: queue, hit query, IO ------------------------------------------------------

    def tap_controller(self, cc: Any) -> None:
        def revoked(original: Callable) -> Callable:
            def wrapper(request_id: Any, *args: Any, **kwargs: Any) -> Any:
                self.trace.record(EventKind.REVOKE, op=request_id, value="hit too short")
                result = original(request_id, *args, **kwargs)
                self.ctx.finishing = request_id  # the prefetch thread releases its slots next: that ends its IO
                return result
            return wrapper

        self.tap_queue(cc)
        wrap(cc.prefetch_revoke_queue, "put", revoked)
        self._tap_load_path(cc)
        self.tap_backup(cc)
        self.tap_terminate(cc)
        self._tap_copies(cc)

    def tap_queue(self, cc: Any) -> None:
        """OP_START when the scheduler queues the operation for the prefetch thread."""
        def queued(original: Callable) -> Callable:
            def wrapper(item: Any, *args: Any, **kwargs: Any) -> Any:
                if item is not None and hasattr(item, "request_id"):
                    with self.io_done:
                        self.started_ops.add(item.request_id)
                    self.trace.record(
                        EventKind.OP_START,
                        op=item.request_id,
                        value={"policy": self.termination.policy.value, "start": float(item.start_time), "page_size": self.page_size,
                               "requested_pages": len(item.token_ids) // self.page_size},
                    )
                return original(item, *args, **kwargs)
            return wrapper

        wrap(cc.prefetch_queue, "put", queued)

    def tap_backup(self, cc: Any) -> None:
        """IO start/end per storage batch the backup thread writes (page_set_func)."""
        def page_set(original: Callable) -> Callable:
            def wrapper(hash_values: Any, host_indices: Any, *args: Any) -> Any:
                io = self.trace.next_io_id()
                start = self.trace.record(EventKind.IO_START, pool=KV, space=HOST, slots=host_indices, io=io, value=BACKUP)
                self.saw_pages(KV, hash_values, host_indices)
                ok = False
                try:
                    self.trace.gate(start)
                    ok = bool(original(hash_values, host_indices, *args))
                    return ok
                finally:
                    self.trace.record(EventKind.IO_END, pool=KV, space=HOST, slots=host_indices, io=io, value=ok)
            return wrapper

        wrap(cc, "page_set_func", page_set)
        if hasattr(cc, "_page_backup"):
            wrap(cc, "_page_backup", self.raising_on_thread("_page_backup (a storage backup)"))

    def raising_on_thread(self, what: str) -> Callable[[Callable], Callable]:
        """Wraps a storage-thread step: an exception leaving it is noted with the thread that raised it."""
        def make(original: Callable) -> Callable:
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                try:
                    return original(*args, **kwargs)
                except BaseException as exc:
                    self.thread_errors.append((threading.get_ident(), f"{type(exc).__name__}: {exc} in {what}"))
                    raise
            return wrapper
        return make

    def saw_pages(self, pool: str, keys: Any, host_indices: Any) -> None:
        """Storage IO between these host slots and these page keys (subclasses that remember which key a slot holds note it)."""

    def tap_terminate(self, cc: Any) -> None:
        def terminate(original: Callable) -> Callable:
            def wrapper(operation: Any) -> Any:
                completed, hashes = original(operation)
                if self.ctx.phase == "abort":
                    self.trace.record(EventKind.REVOKE, op=operation.request_id, value="abort")
                    self.trace.record(EventKind.COMMIT, op=operation.request_id, value=0)
                else:
                    self.trace.record(EventKind.TERMINATE, op=operation.request_id, step=self.ctx.step, value=int(completed))
                return completed, hashes
            return wrapper

        wrap(cc, "terminate_prefetch", terminate)

    def _tap_load_path(self, cc: Any) -> None:
        """HIT when the IO thread takes the operation, IO start/end per storage batch, IO_DONE after its last release."""
        def released(original: Callable) -> Callable:
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                result = original(*args, **kwargs)
                op = getattr(self.ctx, "finishing", None)
                if op is not None:
                    self.ctx.finishing = None
                    self._io_finished(op)
                return result
            return wrapper

        def page_get(original: Callable) -> Callable:
            def wrapper(operation: Any, hash_values: Any, host_indices: Any, *args: Any) -> Any:
                op = operation.request_id
                io = self.trace.next_io_id()
                before = operation.completed_tokens
                start = self.trace.record(EventKind.IO_START, op=op, pool=KV, space=HOST, slots=host_indices, io=io, value=LOAD)
                try:
                    self.trace.gate(start)
                    result = original(operation, hash_values, host_indices, *args)
                except BaseException:
                    self.trace.record(EventKind.IO_END, op=op, pool=KV, space=HOST, slots=host_indices, io=io, value=False)
                    raise
                arrived = max(0, operation.completed_tokens - before)
                self._end_in_parts(op, host_indices, io, arrived)
                return result
            return wrapper

        wrap(cc, "_page_transfer", self.transfer)
        wrap(cc, "append_host_mem_release", released)
        wrap(cc, "page_get_func", page_get)

    def transfer(self, original: Callable) -> Callable:
        """Wraps the IO thread's _page_transfer: transfer_started when it takes the operation; what ends the IO is transfer_raised / transfer_returned."""
        def wrapper(operation: Any) -> Any:
            op = operation.request_id
            self.transfer_started(operation)
            self.ctx.transferring = op
            try:
                result = original(operation)
            except BaseException as exc:
                self.io_thread_errors.append(f"{type(exc).__name__}: {exc} (prefetch of {op})")
                self.thread_errors.append((threading.get_ident(), f"{type(exc).__name__}: {exc} in _page_transfer (prefetch of {op})"))
                self.transfer_raised(op)
                raise
            finally:
                self.ctx.transferring = None
            self.transfer_returned(op)
            return result
        return wrapper

    def transfer_started(self, operation: Any) -> None:
        self.trace.record(EventKind.HIT, op=operation.request_id, value=len(operation.hash_value))  # the hit after the prefetch thread's MIN

    def transfer_raised(self, op: str) -> None:
        self._io_finished(op)  # upstream's IO thread ends here, as it would on a storage error

    def transfer_returned(self, op: str) -> None:
        self.ctx.finishing = op  # its next release (the unused tail) ends its IO

    def _end_in_parts(self, op: str | None, host_indices: Any, io: int, arrived_tokens: int, pool: str = KV) -> None:
        slots = host_indices.tolist()
        done, failed = slots[:arrived_tokens], slots[arrived_tokens:]
        if done:
            self.trace.record(EventKind.IO_END, op=op, pool=pool, space=HOST, slots=done, io=io, value=True)
        if failed:
            self.trace.record(EventKind.IO_END, op=op, pool=pool, space=HOST, slots=failed, io=io, value=False)

    def _tap_copies(self, cc: Any) -> None:
        def copying(direction: str, queue_name: str) -> Callable[[Callable], Callable]:
            def make(original: Callable) -> Callable:
                def wrapper(*args: Any, **kwargs: Any) -> Any:
                    queue = getattr(cc, queue_name)
                    if not queue:
                        return original(*args, **kwargs)
                    slots = torch.cat([op.host_indices for op in queue])
                    io = self.trace.next_io_id()
                    start = self.trace.record(EventKind.IO_START, pool=KV, space=HOST, slots=slots, io=io, value=direction)
                    ok = False
                    try:
                        self.trace.gate(start)
                        result = original(*args, **kwargs)
                        ok = True
                        return result
                    finally:
                        # CPU streams and events are no-ops: the copy has ended when the call returns.
                        self.trace.record(EventKind.IO_END, pool=KV, space=HOST, slots=slots, io=io, value=ok)
                return wrapper
            return make

        wrap(cc, "start_writing", copying(WRITE_BACK_COPY, "write_queue"))
        wrap(cc, "start_loading", copying(LOAD_BACK_COPY, "load_queue"))

    def tap_storage(self, backend: Any, file_name: Callable[[str], str]) -> None:
        def setter(original: Callable) -> Callable:
            def wrapper(key: str, value: Any = None, *args: Any, **kwargs: Any) -> Any:
                ok = original(key, value, *args, **kwargs)
                if ok and value is not None and self.trace.enabled:
                    self.trace.record(EventKind.PAGE_WRITE, pool=self.page_pool(key), keys=[file_name(key)], digests=[tensor_digest(value)])
                return ok
            return wrapper

        wrap(backend, "set", setter)
        if hasattr(backend, "batch_get_v2"):
            wrap(backend, "batch_get_v2", self._pool_io(backend, LOAD))
            wrap(backend, "batch_set_v2", self._pool_io(backend, BACKUP))

    def page_pool(self, key: str) -> str:
        """Upstream stores an extra pool's page under '<hash>.<pool>'."""
        _, dot, suffix = key.rpartition(".")
        return suffix if dot and suffix in self.pools else KV

    def _pool_io(self, backend: Any, direction: str) -> Callable[[Callable], Callable]:
        """One IO per pool transfer of a multi-pool get or set; it ends page by page, as the backend reports."""
        def make(original: Callable) -> Callable:
            def wrapper(transfers: Any, *args: Any, **kwargs: Any) -> Any:
                op = self.ctx.transferring if direction == LOAD else None
                started = []
                for t in transfers:
                    name = str(getattr(t.name, "value", t.name))
                    if t.host_indices is None or name not in self.pools:
                        continue  # not a pool this harness tracks (its slots are not recorded)
                    io = self.trace.next_io_id()
                    start = self.trace.record(EventKind.IO_START, op=op, pool=name, space=HOST, slots=t.host_indices, io=io, value=direction)
                    self.saw_pages(name, t.keys or (), t.host_indices)
                    started.append((t, name, io, start))
                try:
                    for *_, start in started:
                        self.trace.gate(start)
                    results = original(transfers, *args, **kwargs)
                except BaseException:
                    for t, name, io, _ in started:
                        self.trace.record(EventKind.IO_END, op=op, pool=name, space=HOST, slots=t.host_indices, io=io, value=False)
                    raise
                for t, name, io, _ in started:
                    ok = list((results or {}).get(t.name, (results or {}).get(name, [])))
                    width = int(getattr(backend.registered_pools[t.name], "page_size", 1) or 1) if hasattr(backend, "registered_pools") else 1
                    arrived = next((i for i, good in enumerate(ok) if not good), len(ok))
                    self._end_in_parts(op, t.host_indices, io, arrived * width, pool=name)
                return results
            return wrapper
        return make

    # --- the cache: decision, commit ------------------------------------------------------------------

    def tap_cache(self, cache: Any, decision_state: Callable[[Any], DecisionState]) -> None:
        self.decision_state = decision_state

        def inserting(original: Callable) -> Callable:
            def wrapper(node: Any, key: Any, host_value: Any, hash_value: Any, *args: Any, **kwargs: Any) -> Any:
                op = self.ctx.op
                self.trace.record(EventKind.COMMIT, op=op, step=self.ctx.step, value=len(key))
                saved, self.ctx.inserting = self.ctx.inserting, op
                try:
                    matched = original(node, key, host_value, hash_value, *args, **kwargs)
                finally:
                    self.ctx.inserting = saved
                self.inserted(op, host_value[matched:].tolist())
                return matched
            return wrapper

        def progress(original: Callable) -> Callable:
            def wrapper(req_id: str) -> Any:
                with self.scheduling(op=req_id, phase="commit"):
                    return original(req_id)
            return wrapper

        wrap(cache, "can_terminate_prefetch", self.deciding)
        if hasattr(cache, "_all_reduce_attn_groups"):
            wrap(cache, "_all_reduce_attn_groups", self.reducing)
        wrap(cache, "_insert_helper_host", inserting)
        wrap(cache, "check_prefetch_progress", progress)
        wrap(cache, "writing_check", self.phase("write_ack_min"))
        wrap(cache, "loading_check", self.phase("load_ack_min"))
        wrap(cache, "drain_storage_control_queues", self.phase("drain_queues_min"))

    def inserted(self, op: str | None, slots: list[int]) -> None:
        """These KV host slots entered the tree with the commit of op: the tree owns them now."""
        if slots:
            self.trace.record(EventKind.INSERT, op=op, pool=KV, space=HOST, slots=slots)
            for s in slots:
                self.owner[(KV, s)] = TREE

    def deciding(self, original: Callable) -> Callable:
        """Wraps the decision method: the vote is recorded at its reduce, or at its return when no reduce carries it."""
        def wrapper(operation: Any) -> Any:
            saved = (self.ctx.op, self.ctx.phase, self.ctx.voted)
            self.ctx.op, self.ctx.phase, self.ctx.voted = operation.request_id, "vote", False
            self.ctx.operation = operation
            try:
                with collectives.active(self):
                    result = original(operation)
                if not self.ctx.voted:  # no reduce carried the vote: best_effort, or one rank that skips it
                    self._vote_at_return(original, operation, bool(result))
                return result
            finally:
                self.ctx.op, self.ctx.phase, self.ctx.voted = saved
        return wrapper

    def reducing(self, original: Callable) -> Callable:
        def wrapper(tensor: Any, op: Any) -> Any:
            self.on_reduce(tensor)
            return original(tensor, op)
        return wrapper

    def phase(self, name: str) -> Callable[[Callable], Callable]:
        """Wraps a scheduler method whose collectives are named `name`."""
        def make(original: Callable) -> Callable:
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                with self.scheduling(phase=name):
                    return original(*args, **kwargs)
            return wrapper
        return make

    def tap_barrier(self, cache: Any, name: str) -> None:
        """A barrier method of the cache (release_aborted_request runs one)."""
        def barrier(original: Callable) -> Callable:
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                self.on_barrier()
                return original(*args, **kwargs)
            return wrapper

        wrap(cache, name, barrier)

    # --- collectives, however upstream calls them ----------------------------------------------

    def on_reduce(self, tensor: Any) -> None:
        """This rank enters an all-reduce: in the vote, its payload [1 - vote, terminated] is the vote."""
        name = self.ctx.phase or "other"
        if self.ctx.phase == "vote" and tensor.numel() == 2:
            operation = self.ctx.operation
            vote = int(tensor[0].item()) == 0
            self.ctx.voted = True
            self.trace.record(EventKind.VOTE, op=operation.request_id, step=self.ctx.step, value=vote, state=self.decision_state(operation))
            name = VOTE_COLLECTIVE
        elif self.ctx.phase == "commit":
            name = COMMIT_COLLECTIVE
        self.trace.record(EventKind.COLLECTIVE, step=self.ctx.step, op=self.ctx.op, value=name)

    def on_barrier(self) -> None:
        name = "abort_barrier" if self.ctx.phase == "abort" else "barrier"
        self.trace.record(EventKind.COLLECTIVE, step=self.ctx.step, op=self.ctx.op, value=name)

    def _vote_at_return(self, decide: Callable, operation: Any, decided: bool) -> None:
        """Record the vote of a decision that no reduce carried.

        best_effort returns before any reduce: its decision is its vote. One rank
        that skips the reduce returns `vote or terminated`: for an operation
        already terminated the vote is upstream's own decision on a copy not
        marked terminated (the copy enters no collective: there is none on one
        rank); where that cannot be made, the vote is recorded without a state.
        """
        state = self.decision_state(operation)
        vote = decided
        if state is not None and state.terminated and self.termination.policy.uses_collective:
            probe = copy.copy(operation)
            if hasattr(probe, "_terminated_flag"):
                probe._terminated_flag = False
                vote = bool(decide(probe))
            else:
                state = None
        self.trace.record(EventKind.VOTE, op=operation.request_id, step=self.ctx.step, value=vote, state=state)
