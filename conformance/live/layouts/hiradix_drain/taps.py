"""The trace of the 0.5.19/0.5.20 HiRadixCache, recorded from its real objects.

Its controller's IO thread and sync thread are 0.5.21+'s (ACKs through
prefetch_sync_queue and ack_prefetch_queue: conformance/live/layouts/unified/taps.py),
its commit is the fork's (_insert_helper_host), and what differs is listed in
DRAIN_TAP_POINTS (and in docs/upstream.md).
"""

from __future__ import annotations

from typing import Any, Callable

from conformance.live.layouts.unified.taps import AckCounts, drain_commit, request_id, tap_ack_drain_controller
from conformance.live.taps import Taps, wrap
from conformance.live.taps.cache import DecisionStateOf, Votes, tap_insert_helper_host
from spec.decision import VOTE_COLLECTIVE
from spec.fence import COMMIT_COLLECTIVE
from spec.trace import EventKind

DRAIN_TAP_POINTS = (
    ("alloc (owner)", "the host slots the drain allocates after taking an operation from prefetch_hit_queue, "
                      "inside _drain_storage_control_queues_impl, belong to that operation"),
    ("hit", "prefetch_buffer.put inside the drain (the hit query's MIN, trimmed to the host slots allocated)"),
    ("revoke", "_revoke_pending_prefetch (a below-threshold, terminated or unallocatable hit); io_done there for an operation the IO thread never received"),
    ("vote", "can_terminate_prefetch's return (it decides the policy alone); the collective: the MAX of [terminated or vote] "
             "check_prefetch_progress reduces through _all_reduce_attn_groups"),
    ("commit, insert", "_handle_prefetch_result (the drain at the final ACK, or check_prefetch_progress after a terminate) and _insert_helper_host inside it"),
)


def tap_drain_controller(taps: Taps, cc: Any) -> AckCounts:
    return tap_ack_drain_controller(taps, cc, tap_inline_hit_allocation)


def tap_inline_hit_allocation(taps: Taps, cc: Any) -> None:
    """The drain takes an operation from prefetch_hit_queue and allocates its slots inline: they are its; HIT when it hands it on."""
    def taken(original: Callable) -> Callable:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            item = original(*args, **kwargs)
            if item is not None and hasattr(item, "request_id"):
                taps.ctx.op, taps.ctx.phase = request_id(item.request_id), "prefetch"  # restored when the drain returns
            return item
        return wrapper

    def handed(original: Callable) -> Callable:
        def wrapper(item: Any, *args: Any, **kwargs: Any) -> Any:
            if item is not None and hasattr(item, "request_id"):
                taps.trace.record(EventKind.HIT, op=request_id(item.request_id), value=len(item.hash_value))
                taps.ctx.op = taps.ctx.phase = None  # its slots are allocated: nothing later in the drain is its
            return original(item, *args, **kwargs)
        return wrapper

    wrap(cc.prefetch_hit_queue, "get", taken)
    wrap(cc.prefetch_buffer, "put", handed)


class DrainVotes(Votes):
    def on_reduce(self, tensor: Any) -> None:
        """check_prefetch_progress's MAX of [terminated or vote] is the vote collective; the drain's queue sizes the commit's."""
        ctx = self.taps.ctx
        if ctx.phase == "check" and tensor.numel() == 1:
            name = VOTE_COLLECTIVE
        else:
            name = COMMIT_COLLECTIVE if ctx.phase == "ack_drain_min" else (ctx.phase or "other")
        self.taps.trace.record(EventKind.COLLECTIVE, step=ctx.step, op=ctx.op, value=name)


def tap_drain_cache(taps: Taps, cache: Any, decision_state: DecisionStateOf) -> DrainVotes:
    """The vote, the drain's context, revokes before allocation, the commit and what it inserts."""
    votes = DrainVotes(taps, decision_state)

    def draining(original: Callable) -> Callable:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with taps.scheduling():  # the operation a drained hit belongs to is this call's only
                return original(*args, **kwargs)
        return wrapper

    def revoking(original: Callable) -> Callable:
        def wrapper(req_id: Any, *args: Any, **kwargs: Any) -> Any:
            rid = request_id(req_id)
            info = cache.ongoing_prefetch.get(rid)
            if info is not None and taps.ctx.phase != "abort":
                taps.trace.record(EventKind.REVOKE, op=rid, step=taps.ctx.step, value="hit too short, terminated or without host room before its IO")
            result = original(req_id, *args, **kwargs)
            if taps.ctx.phase == "prefetch" and taps.ctx.op == rid:
                taps.ctx.op = taps.ctx.phase = None  # a hit the drain took and revoked: nothing later in the drain is its
            if info is not None and info[2].host_indices is None:
                taps.io_finished(rid)  # the IO thread never received it
            return result
        return wrapper

    def progress(original: Callable) -> Callable:
        def wrapper(request: Any) -> Any:
            with taps.scheduling(op=request_id(request), phase="check"):
                return original(request)
        return wrapper

    wrap(cache, "can_terminate_prefetch", votes.deciding)
    wrap(cache, "_all_reduce_attn_groups", votes.reducing)
    wrap(cache, "_drain_storage_control_queues_impl", draining)
    wrap(cache, "_revoke_pending_prefetch", revoking)
    wrap(cache, "_handle_prefetch_result", drain_commit(taps, lambda operation: request_id(operation.request_id)))
    tap_insert_helper_host(taps, cache)
    wrap(cache, "check_prefetch_progress", progress)
    wrap(cache, "_sync_hicache_ready_counts", taps.phase("ack_drain_min"))
    return votes
