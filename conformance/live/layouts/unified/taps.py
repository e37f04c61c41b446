"""The trace of 0.5.2x's UnifiedRadixCache, recorded from its real objects.

The 0.5.2x line moves the prefetch protocol onto the scheduler: the
prefetch thread only queries storage; the scheduler's ACK drain (inside
check_hicache_events) allocates the hit's host slots, hands the operation
to the IO thread, and commits it when the final ACK arrives, completion and
queue sizes MIN-reduced across ranks. What differs from the fork's tap
points is listed in UNIFIED_TAP_POINTS (and in docs/upstream.md); the rest
is the shared seams' taps (conformance/live/taps/) as they are.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from conformance.live.taps import KV, Taps, tensor_digest, wrap
from conformance.live.taps.cache import DecisionStateOf, Votes
from conformance.live.taps.controller import tap_backup, tap_copies, tap_page_get, tap_queue, tap_terminate, tap_transfer
from conformance.live.taps.storage import pool_name
from spec.fence import COMMIT_COLLECTIVE
from spec.trace import EventKind

UNIFIED_TAP_POINTS = (
    ("alloc (owner)", "HybridCacheController.allocate_storage_hit inside the ACK drain: the host slots a hit gets belong to its operation"),
    ("hit", "HybridCacheController.allocate_storage_hit inside the ACK drain (the hit query's MIN, trimmed to the host slots allocated)"),
    ("io_start / io_end (load)", "page_get_func per storage batch; the pages that arrived are its return value"),
    ("io_done", "prefetch_sync_queue.put of the final ACK (completed_req: the IO thread is done with the operation; "
                "the sync thread then MIN-reduces it across ranks), or revoke_pending_prefetch of an operation the IO thread never received"),
    ("revoke", "revoke_pending_prefetch (the drain's below-threshold or terminated hit, a revoke before allocation)"),
    ("vote, collective", "UnifiedRadixCache._can_terminate_prefetch; its reduce (timeout only) and the drain's "
                         "_sync_hicache_ready_counts go through _all_reduce_attn_groups"),
    ("commit, insert", "_handle_prefetch_result (the ACK drain, or check_prefetch_progress after a terminate) and tree_core.insert_host inside it"),
    ("load_back", "start_loading: each queued load's host pages, keyed by the storage key last read into or written from that slot"),
)


class AckCounts:
    """ACKs the IO thread queued for the sync thread, and those the sync thread forwarded (after its reduce); under taps.io_done."""

    def __init__(self) -> None:
        self.queued = 0
        self.forwarded = 0


def request_id(request: Any) -> str:
    """A request as the trace names it: its id (a CacheRequestHandle's rid, or the id a release passes in its place)."""
    return str(getattr(request, "rid", request))


def _nothing(*_: Any) -> None:
    """The IO thread's end is its final ACK (IO_DONE there), not _page_transfer's return; the hit is the drain's."""


def _raised(taps: Taps, op: str) -> None:
    """_page_transfer raised: the final ACK may never come (a loop without a finally dies first), so waiters look again."""
    with taps.io_done:
        taps.io_done.notify_all()


def tap_ack_drain_controller(taps: Taps, cc: Any, tap_allocation: Callable[[Taps, Any], None] | None = None) -> AckCounts:
    """An ACK-drain controller: the queue, the drain's hit allocation (0.5.22+'s allocate_storage_hit unless told otherwise: 0.5.21 allocates inline),
    the IO thread and its ACKs, backups, terminate, copies."""
    acks = AckCounts()
    tap_queue(taps, cc)
    (tap_allocation or tap_hit_allocation)(taps, cc)
    tap_io_thread(taps, cc, acks)
    tap_backup(taps, cc)
    tap_terminate(taps, cc)
    tap_copies(taps, cc)
    return acks


def tap_hit_allocation(taps: Taps, cc: Any) -> None:
    """The drain fixes the hit (the hit query's MIN, trimmed to the host slots it got): HIT there; the slots are the operation's."""
    def allocating(original: Callable) -> Callable:
        def wrapper(operation: Any, *args: Any, **kwargs: Any) -> Any:
            with taps.scheduling(op=operation.request_id, phase="prefetch"):
                host_indices, allocated = original(operation, *args, **kwargs)
            if host_indices is not None:
                taps.trace.record(EventKind.HIT, op=operation.request_id, value=int(allocated) // taps.page_size)
            return host_indices, allocated
        return wrapper

    wrap(cc, "allocate_storage_hit", allocating)


def tap_io_thread(taps: Taps, cc: Any, acks: AckCounts) -> None:
    def queued(original: Callable) -> Callable:
        def wrapper(ack: Any, *args: Any, **kwargs: Any) -> Any:
            with taps.io_done:
                acks.queued += 1
            result = original(ack, *args, **kwargs)
            if getattr(ack, "completed_req", None):
                taps.io_finished(ack.rid)  # prefetch_io_aux_func's last word on it: this rank's IO thread is done with it
            return result
        return wrapper

    def acked(original: Callable) -> Callable:
        def wrapper(ack: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(ack, *args, **kwargs)
            with taps.io_done:
                acks.forwarded += 1
                taps.io_done.notify_all()
            return result
        return wrapper

    def hit(original: Callable) -> Callable:
        def wrapper(operation: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(operation, *args, **kwargs)
            with taps.io_done:
                taps.io_done.notify_all()  # a scheduler step waiting for the hit query can drain it now
            return result
        return wrapper

    wrap(cc.prefetch_hit_queue, "put", hit)
    tap_transfer(taps, cc, started=_nothing, raised=_raised, returned=_nothing)
    tap_page_get(taps, cc, lambda _operation, _before, pages: int(pages or 0) * taps.page_size)  # it returns the pages that arrived
    wrap(cc.prefetch_sync_queue, "put", queued)
    wrap(cc.ack_prefetch_queue, "put", acked)


def side_hosts_of(sidecars: Sequence[Any], page_size: int) -> dict[str, tuple[Any, int]]:
    """Each sidecar on a host pool of its own: pool -> (host pool, slots per stored page: a page of tokens, or one state)."""
    return {s.name: (s.host, page_size if s.layout.unit == "token" else 1) for s in sidecars if not s.rides_kv_slots}


def tap_load_back(taps: Taps, cc: Any, kv_host: Any, side_hosts: Mapping[str, tuple[Any, int]] | None = None) -> None:
    """LOAD_BACK for each queued load's host pages whose storage key is known, before the copy starts: its KV pages, and
    the pages of each side pool transfer it carries on a host pool of its own (`side_hosts`: side_hosts_of)."""
    side_hosts = side_hosts or {}

    def loading(original: Callable) -> Callable:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if taps.trace.enabled:
                for operation in list(cc.load_queue):
                    record_load_back(taps, KV, kv_host, operation.host_indices.tolist()[:: taps.page_size])
                    for transfer in operation.pool_transfers or ():
                        pool = pool_name(transfer)
                        if pool in side_hosts and transfer.host_indices is not None:
                            host, per_page = side_hosts[pool]
                            record_load_back(taps, pool, host, transfer.host_indices.tolist()[::per_page])
            return original(*args, **kwargs)
        return wrapper

    wrap(cc, "start_loading", loading)


def record_load_back(taps: Taps, pool: str, host: Any, first_slots: Sequence[int]) -> None:
    """LOAD_BACK of the pages (or states) at these first host slots of `pool`, with the digest each holds now."""
    slots, keys, digests = [], [], []
    for slot in first_slots:
        key = taps.slot_keys.get((pool, slot))
        if key is None:
            continue  # a page never read from or written to storage: nothing to compare it with
        slots.append(slot)
        keys.append(key)
        digests.append(tensor_digest(host.get_data_page(slot, flat=True)))
    if slots:
        taps.trace.record(EventKind.LOAD_BACK, pool=pool, slots=slots, keys=keys, digests=digests)


def drain_commit(taps: Taps, op_of: Callable[[Any], str]) -> Callable[[Callable], Callable]:
    """The drain's commit of one operation (`_handle_prefetch_result`), with a COMMIT of 0 where it inserted nothing."""
    def committing(original: Callable) -> Callable:
        def wrapper(operation: Any) -> Any:
            op = op_of(operation)
            before = taps.trace.position()
            with taps.scheduling(op=op, phase="commit"):
                result = original(operation)
            if not any(e.kind is EventKind.COMMIT and e.op == op for e in taps.trace.events()[before:]):
                taps.trace.record(EventKind.COMMIT, op=op, step=taps.ctx.step, value=0)  # discarded whole (nothing inserted)
            return result
        return wrapper
    return committing


class UnifiedVotes(Votes):
    def on_reduce(self, tensor: Any) -> None:
        """The vote's payload is this rank's own verdict (1: terminate), MAX-reduced; the drain's reduce is the commit's collective."""
        if self.own_verdict(tensor):
            return
        ctx = self.taps.ctx
        name = COMMIT_COLLECTIVE if ctx.phase == "ack_drain_min" else (ctx.phase or "other")
        self.taps.trace.record(EventKind.COLLECTIVE, step=ctx.step, op=ctx.op, value=name)


def tap_unified_cache(taps: Taps, cache: Any, decision_state: DecisionStateOf) -> UnifiedVotes:
    """The vote, revokes before allocation, the commit (_handle_prefetch_result) and what tree_core.insert_host takes."""
    votes = UnifiedVotes(taps, decision_state)

    def revoking(original: Callable) -> Callable:
        def wrapper(request: Any, *args: Any, **kwargs: Any) -> Any:
            info = cache.ongoing_prefetch.get(request)
            if info is not None and taps.ctx.phase != "abort":
                taps.trace.record(EventKind.REVOKE, op=request_id(request), step=taps.ctx.step, value="hit too short or terminated before its IO")
            result = original(request, *args, **kwargs)
            if info is not None and info.operation.host_indices is None:
                taps.io_finished(request_id(request))  # the IO thread never received it
            return result
        return wrapper

    def inserting(original: Callable) -> Callable:
        def wrapper(node: Any, key: Any, host_value: Any, hash_value: Any, *args: Any, **kwargs: Any) -> Any:
            op = taps.ctx.op
            taps.trace.record(EventKind.COMMIT, op=op, step=taps.ctx.step, value=len(key))
            result = original(node, key, host_value, hash_value, *args, **kwargs)
            if not result.host_insert_dropped:
                taps.inserted(op, host_value[result.prefix_len:].tolist())
            return result
        return wrapper

    def progress(original: Callable) -> Callable:
        def wrapper(request: Any) -> Any:
            with taps.scheduling(op=request_id(request), phase="check"):
                return original(request)
        return wrapper

    def staging(original: Callable) -> Callable:
        def wrapper(info: Any, *args: Any, **kwargs: Any) -> Any:
            with taps.scheduling(op=request_id(info.operation.request_id), phase="prefetch"):
                return original(info, *args, **kwargs)
        return wrapper

    if hasattr(cache, "_alloc_prefetch_aux_staging"):  # a side component's host slots, bound beside the hit's KV slots
        wrap(cache, "_alloc_prefetch_aux_staging", staging)
    wrap(cache, "_can_terminate_prefetch", votes.deciding)
    wrap(cache, "_all_reduce_attn_groups", votes.reducing)
    wrap(cache, "revoke_pending_prefetch", revoking)
    wrap(cache, "_handle_prefetch_result", drain_commit(taps, lambda operation: operation.request_id))
    wrap(cache.tree_core, "insert_host", inserting)
    wrap(cache, "check_prefetch_progress", progress)
    wrap(cache, "_sync_hicache_ready_counts", taps.phase("ack_drain_min"))
    return votes
