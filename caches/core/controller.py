"""The storage controller: background threads that move pages to and from L3.

- prefetch thread: hit query, cross-rank MIN of the hit, then trim or revoke;
- IO thread: KV pages batch by batch (publishing progress), then every extra
  pool in one multi-pool get, then the done flag;
- backup thread: host pages to storage, acknowledged through a callback.

Every IO is begun and ended through the PrefetchOperation, which owns the
lock the fence depends on. A trace gate may hold any IO (a test releases
it) or raise (a fault): a raise is a failed transfer, never a crashed thread.

Two kinds of exception reach a thread body. A storage call (or the gate at
an IO point) raising is a *fault*: recorded in `faults`, the transfer fails,
the cache carries on. Anything else raising is a *bug* in this code (our own
misuse of the storage interface included): recorded in `failures`, the work
item is ended as failed so nothing waits on it forever, and the scheduler's
next call raises it (HierarchicalCache._ensure_usable).
"""

from __future__ import annotations

import queue
import threading
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from caches.core.operation import InFlightIO, PoolPlan, PrefetchOperation
from caches.core.pools import PoolSet, tensor_bytes_view
from caches.core.reducer import Reducer
from caches.errors import CacheTimeoutError, StorageClosedError, StorageKeyError, StorageTensorError
from caches.storage import PoolTransfer, StorageBackend, pool_key
from spec.fence import HIT_COLLECTIVE, HitPolicy
from spec.trace import BACKUP, HOST, EventKind, TraceRecorder, page_digest

_STOP = object()


@dataclass
class BackupJob:
    """Host pages of one tree node to write to storage.

    pages: one page hash per page; slots[pool]: that pool's host slots, page by
    page for token pools, or one slot (the state at the last page) for state pools.
    """

    node_id: int
    hashes: list[str]
    slots: dict[str, torch.Tensor]
    per_page: dict[str, bool]
    results: dict[str, list[bool]] = field(default_factory=dict)
    node: object = None  # the tree node to unpin once acknowledged


@dataclass(frozen=True)
class ControllerFault:
    where: str
    request_id: str | None
    error: str


@dataclass(frozen=True)
class ThreadFailure:
    """An unexpected exception on a background thread: a bug, not a storage fault."""

    thread: str
    request_id: str | None
    error: BaseException
    trace: str

    def describe(self) -> str:
        on = f" on request {self.request_id}" if self.request_id is not None else ""
        return f"{self.thread} thread failed{on}: {type(self.error).__name__}: {self.error}"


# Raised by a storage call because of how *we* called it: a bug, not a fault.
_MISUSE = (StorageKeyError, StorageTensorError, StorageClosedError)


class StorageController:
    def __init__(
        self,
        *,
        name: str,
        storage: StorageBackend,
        host_pools: PoolSet,
        page_size: int,
        trace: TraceRecorder,
        hit_reducer: Reducer,
        batch_pages: int,
        threshold_pages: int,
        on_backup_done: Callable[[BackupJob], None],
    ) -> None:
        self.name = name
        self.storage = storage
        self.host_pools = host_pools
        self.page_size = page_size
        self.trace = trace
        self.hit_reducer = hit_reducer
        self.batch_pages = batch_pages
        self.threshold_pages = threshold_pages
        self.on_backup_done = on_backup_done
        self.faults: list[ControllerFault] = []
        self.failures: list[ThreadFailure] = []
        self._faults_lock = threading.Lock()
        self._queues = {"prefetch": queue.Queue(), "io": queue.Queue(), "backup": queue.Queue()}
        self.threads = [
            threading.Thread(target=self._loop, args=(kind, work), name=f"{name}-{kind}", daemon=True)
            for kind, work in (("prefetch", self._hit_query), ("io", self._load), ("backup", self._backup))
        ]
        for thread in self.threads:
            thread.start()

    # --- the scheduler's side ---------------------------------------------

    def submit_prefetch(self, op: PrefetchOperation) -> None:
        self._queues["prefetch"].put(op)

    def submit_backup(self, job: BackupJob) -> None:
        self._queues["backup"].put(job)

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop every thread; raise naming any thread that did not stop in time."""
        for q in self._queues.values():
            q.put(_STOP)
        stuck = []
        for thread in self.threads:
            thread.join(timeout_s)
            if thread.is_alive():
                stuck.append(thread.name)
        if stuck:
            raise CacheTimeoutError(f"{', '.join(stuck)} did not stop within {timeout_s}s (held in a gate, a storage call or a collective)")

    def fault_list(self) -> list[ControllerFault]:
        with self._faults_lock:
            return list(self.faults)

    def failure_list(self) -> list[ThreadFailure]:
        with self._faults_lock:
            return list(self.failures)

    # --- thread bodies -------------------------------------------------------

    def _loop(self, kind: str, work: Callable[[object], None]) -> None:
        q = self._queues[kind]
        while True:
            item = q.get()
            if item is _STOP:
                return
            try:
                work(item)
            except Exception as exc:  # a bug: recorded for the scheduler to raise, the item ended as failed
                self._failure(kind, getattr(item, "request_id", None), exc)
                if isinstance(item, PrefetchOperation):
                    item.revoke("error")
                    item.fail_in_flight()
                    item.finish_transfers()

    def _fault(self, where: str, request_id: str | None, exc: BaseException) -> None:
        with self._faults_lock:
            self.faults.append(ControllerFault(where, request_id, f"{type(exc).__name__}: {exc}"))

    def _failure(self, where: str, request_id: str | None, exc: BaseException) -> None:
        failure = ThreadFailure(f"{self.name}-{where}", request_id, exc, traceback.format_exc())
        with self._faults_lock:
            self.failures.append(failure)

    def _storage_call(self, where: str, request_id: str | None, call: Callable[[], Any]) -> Any:
        """Run a storage call (with its gate); a fault is recorded and gives None, a bug propagates."""
        try:
            return call()
        except _MISUSE:
            raise
        except Exception as exc:
            self._fault(where, request_id, exc)
            return None

    def _hit_query(self, op: PrefetchOperation) -> None:
        local = 0
        if not op.is_terminated():
            try:
                local = self._count_hit(op)
            except Exception as exc:  # a bug; this rank still joins the collective below
                self._failure("prefetch", op.request_id, exc)
        # Every rank joins the MIN for every queued operation, whatever its local state (L3).
        agreed = self.hit_reducer.all_reduce_min([local], name=HIT_COLLECTIVE, op=op.request_id)[0]
        if agreed < self.threshold_pages:
            op.revoke("short_hit")
            op.finish_transfers()
        elif op.set_hit(agreed):
            self._queues["io"].put(op)
        else:  # aborted meanwhile: no IO will start
            op.finish_transfers()

    def _count_hit(self, op: PrefetchOperation) -> int:
        """Leading pages usable in every pool: all of an ALL_PAGES pool's, a state or a whole window at the end of a trailing pool's."""
        hashes = op.requested_hashes
        hit = self._exists("hit_query", op, hashes)
        for plan in op.pool_transfers:
            if hit and plan.hit_policy is HitPolicy.ALL_PAGES:
                hit = min(hit, self._exists("hit_query", op, [pool_key(h, plan.pool) for h in hashes[:hit]]))
        trailing = [plan for plan in op.pool_transfers if plan.hit_policy is not HitPolicy.ALL_PAGES]
        return self._trailing_hit(op, trailing, hashes[:hit]) if trailing and hit else hit

    def _trailing_hit(self, op: PrefetchOperation, plans: Sequence[PoolPlan], hashes: Sequence[str]) -> int:
        """The deepest prefix where every trailing pool is stored: a hit past it could never end a match."""
        for pages in range(len(hashes), 0, -1):
            if all(self._trailing_stored(op, plan, hashes[:pages]) for plan in plans):
                return pages
        return 0

    def _trailing_stored(self, op: PrefetchOperation, plan: PoolPlan, hashes: Sequence[str]) -> bool:
        wanted = hashes[-plan.trailing_pages(self.page_size, len(hashes)):]
        return self._exists("hit_query", op, [pool_key(h, plan.pool) for h in wanted]) == len(wanted)

    def _exists(self, where: str, op: PrefetchOperation, keys: Sequence[str]) -> int:
        found = self._storage_call(where, op.request_id, lambda: self.storage.exists_prefix(keys))
        return 0 if found is None else found

    def _load(self, op: PrefetchOperation) -> None:
        ps = self.page_size
        hashes = list(op.progress().hash_value)
        kv_plan = op.plan("kv")
        loaded = 0
        for first in range(0, len(hashes), self.batch_pages):
            last = min(len(hashes), first + self.batch_pages)
            slots = kv_plan.slots[first * ps : last * ps].tolist()
            start = op.begin_io("kv", slots, keys=hashes[first:last])
            if start.refused:
                break
            ok = self._get(op, start, "kv", hashes[first:last], slots[::ps], ps)
            arrived = _leading(ok)
            if not op.end_io(start, "kv", slots[: arrived * ps], slots[arrived * ps :], tokens=arrived * ps):
                break  # terminated meanwhile, or the batch ran past its bound (L4): its pages do not count
            loaded += arrived
            if arrived < last - first:
                break
        # Terminated or not: revoke, trim_hit and each begin_io re-check under the operation's lock (F1).
        if loaded == 0:
            op.revoke("io_failed")
        else:
            op.trim_hit(loaded)
            if op.pool_transfers:
                self._load_extras(op, hashes[:loaded])
        op.finish_transfers()

    def _load_extras(self, op: PrefetchOperation, hashes: list[str]) -> None:
        """One multi-pool get for every extra pool, started only after KV (F1 re-check)."""
        ps = self.page_size
        pages = len(hashes)
        begun: list[tuple[PoolPlan, InFlightIO, list[int], list[str], list[int], int]] = []
        for plan in op.pool_transfers:
            if plan.hit_policy is HitPolicy.TRAILING_PAGES:
                slots = plan.slots.tolist()
                keys, firsts, width = hashes[-1:], slots, 1
            else:  # ALL_PAGES: every page; TRAILING_WINDOW: the window's pages before the end
                count = pages if plan.hit_policy is HitPolicy.ALL_PAGES else plan.trailing_pages(ps, pages)
                slots = plan.slots[: count * ps].tolist()
                keys, firsts, width = hashes[pages - count :], slots[::ps], ps
            start = op.begin_io(plan.pool, slots, keys=keys)
            if start.refused:  # terminated meanwhile: end what was begun, untouched
                for b_plan, b_start, b_slots, *_ in begun:
                    op.end_io(b_start, b_plan.pool, (), b_slots)
                return
            begun.append((plan, start, slots, keys, firsts, width))
        transfers = [
            PoolTransfer(plan.pool, keys, [self.host_pools[plan.pool].page_view(f, width) for f in firsts])
            for plan, _, _, keys, firsts, width in begun
        ]

        def get_all() -> list[list[bool]]:
            for _, start, *_ in begun:
                self.trace.gate(start.event)
            results = self.storage.get_v2(transfers)
            for _, start, *_ in begun:
                self._landed(op, start)
            return results

        results = self._storage_call("extra_pool_get", op.request_id, get_all)
        if results is None:
            results = [[False] * len(b[3]) for b in begun]
        for (plan, start, slots, keys, _, width), ok in zip(begun, results):
            arrived = _leading(ok)
            if plan.hit_policy is HitPolicy.ALL_PAGES:
                done_pages = arrived
            else:  # a state, or a whole window, belongs to exactly this hit length (F4, F10)
                done_pages = pages if arrived == len(keys) else 0
            op.end_io(start, plan.pool, slots[: arrived * width], slots[arrived * width :], pages=done_pages)

    def _get(self, op: PrefetchOperation, start: InFlightIO, pool: str, keys: Sequence[str], firsts: Sequence[int], width: int) -> list[bool]:
        buffer = self.host_pools[pool]
        targets = [buffer.page_view(f, width) for f in firsts]

        def get() -> list[bool]:
            self.trace.gate(start.event)
            ok = self.storage.get(list(keys), targets)
            self._landed(op, start)
            return ok

        ok = self._storage_call(f"{pool}_get", op.request_id, get)
        return [False] * len(keys) if ok is None else ok

    def _landed(self, op: PrefetchOperation, start: InFlightIO) -> None:
        """The storage call of this IO returned: its bytes are in; its end publishes the progress (a hold point, spec/trace.py)."""
        event = self.trace.record(EventKind.IO_LANDED, op=op.request_id, pool=start.pool, space=HOST, slots=list(start.slots), io=start.io)
        self.trace.gate(event)

    def _backup(self, job: BackupJob) -> None:
        ps = self.page_size
        starts = {}
        for pool, slots in job.slots.items():
            starts[pool] = self.trace.record(
                EventKind.IO_START, pool=pool, space=HOST, slots=slots.tolist(), io=self.trace.next_io_id(), value=BACKUP
            )
        results = None
        try:
            transfers = []
            for pool, slots in job.slots.items():
                width = ps if job.per_page[pool] else 1
                keys = job.hashes if job.per_page[pool] else job.hashes[-1:]
                firsts = slots.tolist()[::width]
                transfers.append(PoolTransfer(pool, keys, [self.host_pools[pool].page_view(f, width) for f in firsts]))

            def set_all() -> list[list[bool]]:
                for start in starts.values():
                    self.trace.gate(start)
                return self.storage.set_v2(transfers)

            results = self._storage_call("backup", None, set_all)
            if results is not None and self.trace.enabled:
                for transfer, ok in zip(transfers, results):
                    stored = [(k, t) for k, t, good in zip(transfer.storage_keys(), transfer.tensors, ok) if good]
                    if stored:
                        self.trace.record(
                            EventKind.PAGE_WRITE,
                            pool=transfer.pool,
                            keys=[k for k, _ in stored],
                            digests=[page_digest(tensor_bytes_view(t)) for _, t in stored],
                        )
        finally:  # even after a bug: the job ends (as failed), so flush() and the host pin do not wait forever
            if results is None:
                results = [[False] * (len(job.hashes) if job.per_page[p] else 1) for p in job.slots]
            for (pool, slots), ok in zip(job.slots.items(), results):
                job.results[pool] = list(ok)
                self.trace.record(EventKind.IO_END, pool=pool, space=HOST, slots=slots.tolist(), io=starts[pool].io, value=all(ok))
            self.on_backup_done(job)


def _leading(ok: Sequence[bool]) -> int:
    count = 0
    for flag in ok:
        if not flag:
            break
        count += 1
    return count
