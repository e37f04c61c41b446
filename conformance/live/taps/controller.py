"""Controller taps: the prefetch queue, the IO thread's storage batches, the backup thread, terminate, device<->host copies.

The harness's gate is consulted after each IO start, outside upstream's
locks, exactly where upstream then calls its storage backend or its copy: a
hold parks that thread there, an injected fault is raised there, as a
storage error would be. These are the fork's tap points; a layout whose
IO thread ends differently passes its own ends to tap_transfer (the 0.5.2x
ACK drain: conformance/live/layouts/unified/taps.py).
"""

from __future__ import annotations

import threading
from typing import Any, Callable

import torch

from conformance.live.taps.state import KV, Taps, wrap
from spec.trace import BACKUP, HOST, LOAD, LOAD_BACK_COPY, WRITE_BACK_COPY, EventKind


def tap_fork_controller(taps: Taps, cc: Any) -> None:
    """Every tap point of the fork's HiCacheController / HybridCacheController."""
    tap_queue(taps, cc)
    tap_revoke_queue(taps, cc)
    tap_load_path(taps, cc)
    tap_backup(taps, cc)
    tap_terminate(taps, cc)
    tap_copies(taps, cc)


def tap_queue(taps: Taps, cc: Any) -> None:
    """OP_START when the scheduler queues the operation for the prefetch thread."""
    def queued(original: Callable) -> Callable:
        def wrapper(item: Any, *args: Any, **kwargs: Any) -> Any:
            if item is not None and hasattr(item, "request_id"):
                taps.op_started(item.request_id)
                taps.trace.record(
                    EventKind.OP_START,
                    op=item.request_id,
                    value={"policy": taps.termination.policy.value, "start": float(item.start_time), "page_size": taps.page_size,
                           "requested_pages": len(item.token_ids) // taps.page_size},
                )
            return original(item, *args, **kwargs)
        return wrapper

    wrap(cc.prefetch_queue, "put", queued)


def tap_revoke_queue(taps: Taps, cc: Any) -> None:
    """REVOKE when the prefetch thread revokes a too-short hit; the slots it releases next end the operation's IO."""
    def revoked(original: Callable) -> Callable:
        def wrapper(request_id: Any, *args: Any, **kwargs: Any) -> Any:
            taps.trace.record(EventKind.REVOKE, op=request_id, value="hit too short")
            result = original(request_id, *args, **kwargs)
            taps.ctx.finishing = request_id
            return result
        return wrapper

    wrap(cc.prefetch_revoke_queue, "put", revoked)


def _fork_transfer_started(taps: Taps, operation: Any) -> None:
    taps.trace.record(EventKind.HIT, op=operation.request_id, value=len(operation.hash_value))  # the hit after the prefetch thread's MIN


def _fork_transfer_raised(taps: Taps, op: str) -> None:
    taps.io_finished(op)  # upstream's IO thread starts no more IO for it


def _fork_transfer_returned(taps: Taps, op: str) -> None:
    taps.ctx.finishing = op  # its next release (the unused tail) ends its IO


def release_site(cc: Any) -> tuple[Any, str]:
    """Where the IO thread releases an operation's unused host slots: append_host_mem_release, or, on a controller
    without it (before 2025-09), the host pool's own free."""
    return (cc, "append_host_mem_release") if hasattr(cc, "append_host_mem_release") else (cc.mem_pool_host, "free")


def tap_load_path(taps: Taps, cc: Any, get_func: str = "page_get_func", *, done_at_return: bool = False) -> None:
    """HIT when the IO thread takes the operation, IO start/end per storage batch (get_func: the controller's per-batch
    get), IO_DONE after its last release; done_at_return: when _page_transfer returns instead, where the IO thread waits
    on its peers' IO threads before that release (it starts no IO after the transfer either way)."""
    def released(original: Callable) -> Callable:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            op = taps.ctx.finishing
            if op is not None:
                taps.ctx.finishing = None
                taps.io_finished(op)
            return result
        return wrapper

    tap_transfer(taps, cc, started=_fork_transfer_started, raised=_fork_transfer_raised,
                 returned=_fork_transfer_raised if done_at_return else _fork_transfer_returned)
    wrap(*release_site(cc), released)
    tap_page_get(taps, cc, lambda operation, before, _result: max(0, operation.completed_tokens - before), get_func)


def tap_page_get(taps: Taps, cc: Any, arrived_tokens: Callable[[Any, int, Any], int], get_func: str = "page_get_func") -> None:
    """IO start/end around each storage batch the IO thread loads (get_func), the gate before the storage call.

    arrived_tokens(operation, completed tokens before, what page_get_func returned): the tokens that landed.
    """
    def page_get(original: Callable) -> Callable:
        def wrapper(operation: Any, hash_values: Any, host_indices: Any, *args: Any) -> Any:
            op = operation.request_id
            io = taps.trace.next_io_id()
            before = operation.completed_tokens
            start = taps.trace.record(EventKind.IO_START, op=op, pool=KV, space=HOST, slots=host_indices, io=io, value=LOAD)
            taps.saw_pages(KV, hash_values, host_indices)
            try:
                taps.trace.gate(start)
                result = original(operation, hash_values, host_indices, *args)
            except BaseException:
                taps.trace.record(EventKind.IO_END, op=op, pool=KV, space=HOST, slots=host_indices, io=io, value=False)
                raise
            taps.end_in_parts(op, host_indices, io, arrived_tokens(operation, before, result))
            return result
        return wrapper

    wrap(cc, get_func, page_get)


def tap_transfer(taps: Taps, cc: Any, *, started: Callable[[Taps, Any], None], raised: Callable[[Taps, str], None],
                 returned: Callable[[Taps, str], None]) -> None:
    """Wraps the IO thread's _page_transfer: `started` when it takes the operation; `raised` or `returned` when it leaves it."""
    def make(original: Callable) -> Callable:
        def wrapper(operation: Any) -> Any:
            op = operation.request_id
            taps.io_thread = threading.current_thread()
            started(taps, operation)
            taps.ctx.transferring = op
            try:
                result = original(operation)
            except BaseException as exc:
                taps.io_thread_errors.append(f"{type(exc).__name__}: {exc} (prefetch of {op})")
                taps.thread_errors.append((threading.get_ident(), f"{type(exc).__name__}: {exc} in _page_transfer (prefetch of {op})"))
                raised(taps, op)
                raise
            finally:
                taps.ctx.transferring = None
            returned(taps, op)
            return result
        return wrapper

    wrap(cc, "_page_transfer", make)


def backup_batch(taps: Taps, keys: Any, host_indices: Any, write: Callable[[], Any]) -> bool:
    """One storage batch the backup thread writes from these host slots: IO start, the gate, write(), IO end."""
    io = taps.trace.next_io_id()
    start = taps.trace.record(EventKind.IO_START, pool=KV, space=HOST, slots=host_indices, io=io, value=BACKUP)
    taps.saw_pages(KV, keys, host_indices)
    ok = False
    try:
        taps.trace.gate(start)
        ok = bool(write())
        return ok
    finally:
        taps.trace.record(EventKind.IO_END, pool=KV, space=HOST, slots=host_indices, io=io, value=ok)


def tap_backup(taps: Taps, cc: Any, set_func: str = "page_set_func") -> None:
    """IO start/end per storage batch the backup thread writes (set_func: the controller's per-batch set)."""
    def page_set(original: Callable) -> Callable:
        def wrapper(hash_values: Any, host_indices: Any, *args: Any) -> Any:
            return backup_batch(taps, hash_values, host_indices, lambda: original(hash_values, host_indices, *args))
        return wrapper

    wrap(cc, set_func, page_set)
    if hasattr(cc, "_page_backup"):
        wrap(cc, "_page_backup", taps.raising_on_thread("_page_backup (a storage backup)"))


def tap_terminate(taps: Taps, cc: Any) -> None:
    """TERMINATE inside a check (with its step); inside an abort, a REVOKE and an empty COMMIT."""
    def terminate(original: Callable) -> Callable:
        def wrapper(operation: Any) -> Any:
            completed, hashes = original(operation)
            if taps.ctx.phase == "abort":
                taps.trace.record(EventKind.REVOKE, op=operation.request_id, value="abort")
                taps.trace.record(EventKind.COMMIT, op=operation.request_id, value=0)
            else:
                taps.trace.record(EventKind.TERMINATE, op=operation.request_id, step=taps.ctx.step, value=int(completed))
            return completed, hashes
        return wrapper

    wrap(cc, "terminate_prefetch", terminate)


def tap_copies(taps: Taps, cc: Any) -> None:
    """IO start/end around start_writing / start_loading (device<->host copies), gated before the copy."""
    def copying(direction: str, queue_name: str) -> Callable[[Callable], Callable]:
        def make(original: Callable) -> Callable:
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                queue = getattr(cc, queue_name)
                if not queue:
                    return original(*args, **kwargs)
                slots = torch.cat([op.host_indices for op in queue])
                io = taps.trace.next_io_id()
                start = taps.trace.record(EventKind.IO_START, pool=KV, space=HOST, slots=slots, io=io, value=direction)
                ok = False
                try:
                    taps.trace.gate(start)
                    result = original(*args, **kwargs)
                    ok = True
                    return result
                finally:
                    # CPU streams and events are no-ops: the copy has ended when the call returns.
                    taps.trace.record(EventKind.IO_END, pool=KV, space=HOST, slots=slots, io=io, value=ok)
            return wrapper
        return make

    wrap(cc, "start_writing", copying(WRITE_BACK_COPY, "write_queue"))
    wrap(cc, "start_loading", copying(LOAD_BACK_COPY, "load_queue"))
