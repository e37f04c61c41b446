"""HiRadixCache of the hit-drain layout: the fork's session, with the scheduler's steps run until the drain takes each hit.

What it shares with the fork's (HiRadixSession): the cache built from
CacheInitParams, the vote, terminate and commit inside
check_prefetch_progress, the IO thread's taps. What differs: a prefetch's
host slots are allocated by the drain of a later scheduler step
(check_hicache_events), so prefetch() steps until the drain has taken the hit
(allocated or revoked it), and the taps name the drain's allocation and
revoke; the server args are published as the scheduler publishes them where
the tree has a runtime context.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from conformance.live.ack_drain import AckDrainSession
from conformance.live.layouts.hiradix.session import HiRadixSession, configure  # noqa: F401  (configure: the adapter's C1/C2 entry)
from conformance.live.layouts.hiradix_drain.session import HiRadixDrainSession
from conformance.live.taps import KV, Taps, wrap
from conformance.live.taps.cache import tap_fork_cache
from conformance.live.taps.controller import tap_backup, tap_copies, tap_load_path, tap_queue, tap_terminate
from conformance.live.taps.host import tap_host_pool
from conformance.live.taps.storage import tap_storage
from spec.decision import DecisionState
from spec.trace import EventKind


class HitDrainSession(HiRadixSession):
    """One upstream HiRadixCache of the hit-drain layout for one test."""

    def configure(self, host_ratio: float) -> tuple[Any, Any]:
        context = self.runtime.modules.get("runtime_context")
        if context is not None and hasattr(context, "publish"):
            return AckDrainSession.configure(self, host_ratio)  # type: ignore[arg-type]
        return super().configure(host_ratio)

    def tap(self) -> None:
        tap_host_pool(self.taps, self.kv_host, KV)
        for tap_point in (tap_queue, tap_load_path, tap_backup, tap_terminate, tap_copies):
            tap_point(self.taps, self.cc)
        tap_storage(self.taps, self.backend, self.storage_file_name)
        tap_fork_cache(self.taps, self.cache, self.decision_state)
        tap_hit_drain(self.taps, self.cache)

    def hit_drained(self, request_id: str) -> bool:
        entry = self.cache.ongoing_prefetch.get(request_id)
        return entry is None or entry[-1].host_indices is not None

    def prefetch(self, request_id: str, tokens: Sequence[int]) -> int:
        requested = super().prefetch(request_id, tokens)
        if requested:
            AckDrainSession.pump(self, lambda: self.hit_drained(request_id),  # type: ignore[arg-type]
                                 f"the scheduler's drain to take the storage hit of {request_id}")
        return requested

    def make_operation(self, state: DecisionState, *, start_time: float) -> Any:
        return HiRadixDrainSession.make_operation(self, state, start_time=start_time)  # type: ignore[arg-type]


def tap_hit_drain(taps: Taps, cache: Any) -> None:
    """The host slots the drain allocates after taking an operation from prefetch_hit_queue are that operation's; a
    revoke before its IO (a short, terminated or unallocatable hit) is a REVOKE and ends an IO that never started."""
    cc = cache.cache_controller

    def taken(original: Callable) -> Callable:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            item = original(*args, **kwargs)
            if item is not None and hasattr(item, "request_id"):
                taps.ctx.op, taps.ctx.phase = item.request_id, "prefetch"
            return item
        return wrapper

    def handed(original: Callable) -> Callable:
        def wrapper(item: Any, *args: Any, **kwargs: Any) -> Any:
            if item is not None and hasattr(item, "request_id"):
                taps.ctx.op = taps.ctx.phase = None  # its slots are allocated: nothing later in the drain is its
            return original(item, *args, **kwargs)
        return wrapper

    def draining(original: Callable) -> Callable:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with taps.scheduling():
                return original(*args, **kwargs)
        return wrapper

    def revoking(original: Callable) -> Callable:
        def wrapper(req_id: Any, *args: Any, **kwargs: Any) -> Any:
            info = cache.ongoing_prefetch.get(req_id)
            if info is not None and taps.ctx.phase != "abort":
                taps.trace.record(EventKind.REVOKE, op=req_id, step=taps.ctx.step, value="hit too short, terminated or without host room before its IO")
            result = original(req_id, *args, **kwargs)
            if taps.ctx.op == req_id and taps.ctx.phase == "prefetch":
                taps.ctx.op = taps.ctx.phase = None
            if info is not None and info[-1].host_indices is None:
                taps.io_finished(req_id)  # the IO thread never received it
            return result
        return wrapper

    wrap(cc.prefetch_hit_queue, "get", taken)
    wrap(cc.prefetch_buffer, "put", handed)
    wrap(cache, "_drain_storage_control_queues_impl", draining)
    wrap(cache, "_revoke_pending_prefetch", revoking)
