"""Storage-backend taps: each page write (keyed by its file name), and one IO per pool transfer of a multi-pool get or set."""

from __future__ import annotations

from typing import Any, Callable

from conformance.live.taps.state import KV, Taps, tensor_digest, wrap
from spec.trace import BACKUP, HOST, LOAD, EventKind


def tap_storage(taps: Taps, backend: Any, file_name: Callable[[str], str]) -> None:
    """PAGE_WRITE at backend.set; the extra pools' IO at batch_get_v2 (IO thread) and batch_set_v2 (backup thread)."""
    taps.file_name = file_name

    def setter(original: Callable) -> Callable:
        def wrapper(key: str, value: Any = None, *args: Any, **kwargs: Any) -> Any:
            ok = original(key, value, *args, **kwargs)
            if ok and value is not None and taps.trace.enabled:
                taps.trace.record(EventKind.PAGE_WRITE, pool=taps.page_pool(key), keys=[file_name(key)], digests=[tensor_digest(value)])
            return ok
        return wrapper

    wrap(backend, "set", setter)
    if hasattr(backend, "batch_get_v2"):
        wrap(backend, "batch_get_v2", _pool_io(taps, backend, LOAD))
        wrap(backend, "batch_set_v2", _pool_io(taps, backend, BACKUP))


def pool_name(transfer: Any) -> str:
    return str(getattr(transfer.name, "value", transfer.name))


def storage_key(backend: Any, pool: Any, key: str) -> str:
    """The key a pool's page is stored under: the backend's own rule where it has one, else upstream's '<hash>.<pool>'."""
    log_key = getattr(backend, "_log_key", None)
    if log_key is not None:
        return log_key(pool, key)
    name = str(getattr(pool, "value", pool))
    return key if name == KV else f"{key}.{name}"


def _pool_io(taps: Taps, backend: Any, direction: str) -> Callable[[Callable], Callable]:
    """One IO per pool transfer of a multi-pool get or set; it ends page by page, as the backend reports."""
    def make(original: Callable) -> Callable:
        def wrapper(transfers: Any, *args: Any, **kwargs: Any) -> Any:
            op = taps.ctx.transferring if direction == LOAD else None
            started = []
            for t in transfers:
                name = pool_name(t)
                if t.host_indices is None or name not in taps.pools:
                    continue  # not a pool this harness tracks (its slots are not recorded)
                io = taps.trace.next_io_id()
                start = taps.trace.record(EventKind.IO_START, op=op, pool=name, space=HOST, slots=t.host_indices, io=io, value=direction)
                taps.saw_pages(name, [storage_key(backend, t.name, key) for key in t.keys or ()], t.host_indices)
                started.append((t, name, io, start))
            try:
                for *_, start in started:
                    taps.trace.gate(start)
                results = original(transfers, *args, **kwargs)
            except BaseException:
                for t, name, io, _ in started:
                    taps.trace.record(EventKind.IO_END, op=op, pool=name, space=HOST, slots=t.host_indices, io=io, value=False)
                raise
            for t, name, io, _ in started:
                ok = list((results or {}).get(t.name, (results or {}).get(name, [])))
                width = int(getattr(backend.registered_pools[t.name], "page_size", 1) or 1) if hasattr(backend, "registered_pools") else 1
                arrived = next((i for i, good in enumerate(ok) if not good), len(ok))
                taps.end_in_parts(op, t.host_indices, io, arrived * width, pool=name)
            return results
        return wrapper
    return make
