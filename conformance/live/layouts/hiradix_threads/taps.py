"""The trace of a HiRadixCache whose controller copies on threads of its own, recorded from its real objects.

What it shares with the fork's later controller (conformance/live/taps/):
the prefetch queue, the revoke queue, terminate, the IO thread's
_page_transfer, the backup's batches, the commit. What differs is listed in
COPY_THREAD_TAP_POINTS (and in docs/upstream.md).
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from conformance.live.taps import KV, Taps, wrap
from conformance.live.taps.cache import Votes
from conformance.live.taps.controller import backup_batch
from spec.trace import HOST, LOAD, LOAD_BACK_COPY, WRITE_BACK_COPY, EventKind

COPY_THREAD_TAP_POINTS = (
    ("io_start / io_end (copies)", "the host pool's backup_from_device_all_layer on the write thread; from the first layer's "
                                   "load_to_device_per_layer to the last on the load thread; gated before the copy"),
    ("io_start / io_end (load)", "the controller's page_get_func where it has one, else the generic get _page_transfer calls "
                                 "(_generic_page_get); a fixed batch split into the test's (the storage-batch-size shim)"),
    ("io_start / io_end (backup)", "page_set_func where the controller has one, else _generic_page_set"),
    ("io_done", "the IO thread's release after _page_transfer: append_host_mem_release, or the host pool's free where the "
                "controller has no release queue"),
    ("vote", "the MIN all-reduce of [vote] inside can_terminate_prefetch (before 2025-09-08; the fork's MAX of "
             "[1 - vote, terminated] after it)"),
)


def batch_functions(cc: Any) -> tuple[str, str]:
    """The controller's per-batch get and set: page_get_func/page_set_func where it picks them once (2025-09-05 on),
    else the generic pair its _page_transfer and _page_backup pick for the file backend."""
    if hasattr(cc, "page_get_func"):
        return "page_get_func", "page_set_func"
    return "_generic_page_get", "_generic_page_set"


class CopyThreadsTaps:
    """The copies the write and load threads make, and the loads acknowledged (the harness waits for one to end)."""

    def __init__(self, taps: Taps, cc: Any) -> None:
        self.taps = taps
        self.cc = cc
        self.acked = threading.Condition()
        self.acked_loads: set[int] = set()  # node ids the load thread acknowledged

    def install(self) -> None:
        host = self.cc.mem_pool_host
        wrap(host, "backup_from_device_all_layer", self._backing_up)
        wrap(host, "load_to_device_per_layer", self._loading(host.layer_num))
        wrap(self.cc.ack_load_queue, "put", self._load_acked)
        wrap(self.cc.ack_write_queue, "put", self._notifying)

    def _start(self, slots: Any, direction: str) -> tuple[int, Any]:
        io = self.taps.trace.next_io_id()
        start = self.taps.trace.record(EventKind.IO_START, pool=KV, space=HOST, slots=slots, io=io, value=direction)
        return io, start

    def _end(self, slots: Any, io: int, ok: bool) -> None:
        self.taps.trace.record(EventKind.IO_END, pool=KV, space=HOST, slots=slots, io=io, value=ok)

    def _backing_up(self, original: Callable) -> Callable:
        def wrapper(device_pool: Any, host_indices: Any, *args: Any, **kwargs: Any) -> Any:
            io, start = self._start(host_indices, WRITE_BACK_COPY)
            ok = False
            try:
                self.taps.trace.gate(start)
                result = original(device_pool, host_indices, *args, **kwargs)
                ok = True
                return result
            finally:
                self._end(host_indices, io, ok)
        return wrapper

    def _loading(self, layers: int) -> Callable[[Callable], Callable]:
        """One load is every layer of one batch: it starts at layer 0 and ends after the last (the load thread's loop)."""
        current = threading.local()

        def make(original: Callable) -> Callable:
            def wrapper(device_pool: Any, host_indices: Any, device_indices: Any, layer_id: int, *args: Any, **kwargs: Any) -> Any:
                if layer_id == 0:
                    current.io, start = self._start(host_indices, LOAD_BACK_COPY)
                    self._gate_on_thread(start, host_indices, current.io)
                try:
                    result = original(device_pool, host_indices, device_indices, layer_id, *args, **kwargs)
                except BaseException as exc:
                    self._end(host_indices, current.io, False)
                    self.taps.thread_errors.append((threading.get_ident(), f"{type(exc).__name__}: {exc} in load_to_device_per_layer"))
                    raise
                if layer_id == layers - 1:
                    self._end(host_indices, current.io, True)
                return result
            return wrapper
        return make

    def _gate_on_thread(self, start: Any, slots: Any, io: int) -> None:
        try:
            self.taps.trace.gate(start)
        except BaseException as exc:  # an injected fault: the load thread's loop catches nothing, so it ends here
            self._end(slots, io, False)
            self.taps.thread_errors.append((threading.get_ident(), f"{type(exc).__name__}: {exc} in load_to_device_per_layer"))
            raise

    def _load_acked(self, original: Callable) -> Callable:
        def wrapper(node_id: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(node_id, *args, **kwargs)
            with self.acked:
                self.acked_loads.add(int(node_id))
                self.acked.notify_all()
            return result
        return wrapper

    def _notifying(self, original: Callable) -> Callable:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            with self.acked:
                self.acked.notify_all()
            return result
        return wrapper

    def wait_loads(self, node_ids: set[int], timeout_s: float, thread_alive: Callable[[], bool]) -> bool:
        """True once the load thread acknowledged every node of `node_ids`; False at the bound or once it died."""
        with self.acked:
            return self.acked.wait_for(lambda: node_ids <= self.acked_loads or not thread_alive(), timeout_s) and node_ids <= self.acked_loads


class MinVotes(Votes):
    """A vote reduced as the MIN of [vote] (one element, 1 votes yes): can_terminate_prefetch before 2025-09-08."""

    def on_reduce(self, tensor: Any) -> None:
        if not self.own_verdict(tensor):
            super().on_reduce(tensor)


WHOLE_TRANSFER, WHOLE_BACKUP = "generic_page_transfer", "generic_page_backup"


class WholeTransferTaps:
    """0.5.0/0.5.1's IO and backup threads, which move a whole operation in one call (generic_page_transfer and
    generic_page_backup, batch_size=8), one storage batch_get or batch_set per batch, then count it.

    A batch's slots are those from completed_tokens on (each batch starts where the last one ended, or the call
    stops). A load's IO starts at its batch_get, the gate before it, and ends when the next batch starts or the
    transfer returns, with the pages that landed (written after the count grows); a backup's is its batch_set. The
    batch is the test's (the storage-batch-size shim) where the file backend's call takes the default one.
    """

    def __init__(self, taps: Taps, cc: Any, pages: int) -> None:
        self.taps = taps
        self.cc = cc
        self.pages = pages
        self.current = threading.local()  # per thread: the operation it moves, the load batch still open

    def install(self) -> None:
        wrap(self.cc, WHOLE_TRANSFER, self._transferring)
        wrap(self.cc, WHOLE_BACKUP, self._backing_up)
        wrap(self.cc.storage_backend, "batch_get", self._getting)
        wrap(self.cc.storage_backend, "batch_set", self._setting)

    def _batch(self, args: tuple, kwargs: dict) -> tuple:
        """The call's arguments after the operation: the test's batch where the call takes the default one."""
        return args if args or "batch_size" in kwargs else (self.pages,)

    def _slots(self, keys: Any) -> Any:
        operation = self.current.operation
        start = operation.completed_tokens
        return operation.host_indices[start : start + len(keys) * self.taps.page_size]

    def _transferring(self, original: Callable) -> Callable:
        def wrapper(operation: Any, *args: Any, **kwargs: Any) -> Any:
            taps, op = self.taps, operation.request_id
            taps.io_thread = threading.current_thread()
            taps.trace.record(EventKind.HIT, op=op, value=len(operation.hash_value))
            self.current.operation, self.current.open = operation, None
            taps.ctx.transferring = op
            try:
                return original(operation, *self._batch(args, kwargs), **kwargs)
            except BaseException as exc:
                taps.io_thread_errors.append(f"{type(exc).__name__}: {exc} (prefetch of {op})")
                taps.thread_errors.append((threading.get_ident(), f"{type(exc).__name__}: {exc} in {WHOLE_TRANSFER} (prefetch of {op})"))
                raise
            finally:
                self._close_load()
                self.current.operation = None
                taps.ctx.transferring = None
                taps.io_finished(op)  # it starts no more IO for the operation
        return wrapper

    def _close_load(self) -> None:
        opened = getattr(self.current, "open", None)
        if opened is not None:
            self.current.open = None
            io, slots, before = opened
            arrived = self.current.operation.completed_tokens - before
            self.taps.end_in_parts(self.taps.ctx.transferring, slots, io, max(0, arrived))

    def _getting(self, original: Callable) -> Callable:
        def wrapper(keys: Any, *args: Any, **kwargs: Any) -> Any:
            if getattr(self.current, "operation", None) is None:
                return original(keys, *args, **kwargs)
            self._close_load()
            taps, op, slots = self.taps, self.taps.ctx.transferring, self._slots(keys)
            io = taps.trace.next_io_id()
            start = taps.trace.record(EventKind.IO_START, op=op, pool=KV, space=HOST, slots=slots, io=io, value=LOAD)
            taps.saw_pages(KV, keys, slots)
            try:
                taps.trace.gate(start)
                result = original(keys, *args, **kwargs)
            except BaseException:
                taps.trace.record(EventKind.IO_END, op=op, pool=KV, space=HOST, slots=slots, io=io, value=False)
                raise
            self.current.open = (io, slots, self.current.operation.completed_tokens)
            return result
        return wrapper

    def _backing_up(self, original: Callable) -> Callable:
        def wrapper(operation: Any, *args: Any, **kwargs: Any) -> Any:
            self.current.operation = operation
            try:
                return self.taps.raising_on_thread(WHOLE_BACKUP)(original)(operation, *self._batch(args, kwargs), **kwargs)
            finally:
                self.current.operation = None
        return wrapper

    def _setting(self, original: Callable) -> Callable:
        def wrapper(keys: Any, *args: Any, **kwargs: Any) -> Any:
            if getattr(self.current, "operation", None) is None:
                return original(keys, *args, **kwargs)
            return backup_batch(self.taps, keys, self._slots(keys), lambda: original(keys, *args, **kwargs))
        return wrapper
