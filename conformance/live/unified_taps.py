"""The trace of 0.5.2x's UnifiedRadixCache, recorded from its real objects.

The 0.5.2x line moves the prefetch protocol onto the scheduler: the
prefetch thread only queries storage; the scheduler's ACK drain (inside
check_hicache_events) allocates the hit's host slots, hands the operation
to the IO thread, and commits it when the final ACK arrives, completion and
queue sizes MIN-reduced across ranks. What differs from the fork's tap
points is listed in UNIFIED_TAP_POINTS (and in docs/upstream.md); the rest is
Taps as it is.
"""

from __future__ import annotations

from typing import Any, Callable

from conformance.live.taps import KV, Taps, tensor_digest, wrap
from spec.decision import VOTE_COLLECTIVE
from spec.fence import COMMIT_COLLECTIVE
from spec.trace import HOST, LOAD, EventKind

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


class UnifiedTaps(Taps):
    """Taps for UnifiedRadixCache and its HybridCacheController."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.slot_keys: dict[tuple[str, int], str] = {}  # (pool, first host slot of a page) -> storage file name
        self.file_name: Callable[[str], str] = str
        # ACKs the IO thread queued for the sync thread, and those the sync thread forwarded (after its reduce)
        self.acks_queued = 0
        self.acks_forwarded = 0

    # --- which key a host page holds (for load-back records) -----------------------------------

    def saw_pages(self, pool: str, keys: Any, host_indices: Any) -> None:
        slots = host_indices.tolist()
        for page, key in enumerate(keys):
            if page * self.page_size < len(slots):
                self.slot_keys[(pool, slots[page * self.page_size])] = self.file_name(key)

    def forget_slot(self, pool: str, slot: int) -> None:
        self.slot_keys.pop((pool, slot), None)

    # --- the controller ----------------------------------------------------------------------------

    def tap_controller(self, cc: Any) -> None:
        self.tap_queue(cc)
        self._tap_hit_allocation(cc)
        self._tap_io_thread(cc)
        self.tap_backup(cc)
        self.tap_terminate(cc)
        self._tap_copies(cc)

    def _tap_hit_allocation(self, cc: Any) -> None:
        """The drain fixes the hit (the hit query's MIN, trimmed to the host slots it got): HIT there; the slots are the operation's."""
        def allocating(original: Callable) -> Callable:
            def wrapper(operation: Any, *args: Any, **kwargs: Any) -> Any:
                with self.scheduling(op=operation.request_id, phase="prefetch"):
                    host_indices, allocated = original(operation, *args, **kwargs)
                if host_indices is not None:
                    self.trace.record(EventKind.HIT, op=operation.request_id, value=int(allocated) // self.page_size)
                return host_indices, allocated
            return wrapper

        wrap(cc, "allocate_storage_hit", allocating)

    def _tap_io_thread(self, cc: Any) -> None:
        def page_get(original: Callable) -> Callable:
            def wrapper(operation: Any, hash_values: Any, host_indices: Any, *args: Any) -> Any:
                op = operation.request_id
                io = self.trace.next_io_id()
                start = self.trace.record(EventKind.IO_START, op=op, pool=KV, space=HOST, slots=host_indices, io=io, value=LOAD)
                self.saw_pages(KV, hash_values, host_indices)
                try:
                    self.trace.gate(start)
                    pages = original(operation, hash_values, host_indices, *args)
                except BaseException:
                    self.trace.record(EventKind.IO_END, op=op, pool=KV, space=HOST, slots=host_indices, io=io, value=False)
                    raise
                self._end_in_parts(op, host_indices, io, int(pages or 0) * self.page_size)
                return pages
            return wrapper

        def queued(original: Callable) -> Callable:
            def wrapper(ack: Any, *args: Any, **kwargs: Any) -> Any:
                with self.io_done:
                    self.acks_queued += 1
                result = original(ack, *args, **kwargs)
                if getattr(ack, "completed_req", None):
                    self._io_finished(ack.rid)  # prefetch_io_aux_func's last word on it: this rank's IO thread is done with it
                return result
            return wrapper

        def acked(original: Callable) -> Callable:
            def wrapper(ack: Any, *args: Any, **kwargs: Any) -> Any:
                result = original(ack, *args, **kwargs)
                with self.io_done:
                    self.acks_forwarded += 1
                    self.io_done.notify_all()
                return result
            return wrapper

        def hit(original: Callable) -> Callable:
            def wrapper(operation: Any, *args: Any, **kwargs: Any) -> Any:
                result = original(operation, *args, **kwargs)
                with self.io_done:
                    self.io_done.notify_all()  # a scheduler step waiting for the hit query can drain it now
                return result
            return wrapper

        wrap(cc.prefetch_hit_queue, "put", hit)
        wrap(cc, "_page_transfer", self.transfer)
        wrap(cc, "page_get_func", page_get)
        wrap(cc.prefetch_sync_queue, "put", queued)
        wrap(cc.ack_prefetch_queue, "put", acked)

    def transfer_started(self, operation: Any) -> None:
        """The hit was recorded where the drain fixed it (allocate_storage_hit)."""

    def transfer_raised(self, op: str) -> None:
        """Nothing ends here: prefetch_io_aux_func still sends the final ACK (IO_DONE) after an exception."""

    def transfer_returned(self, op: str) -> None:
        """Nothing ends here: the final ACK the IO thread queues next is IO_DONE."""

    def tap_load_back(self, cc: Any, kv_host: Any) -> None:
        """LOAD_BACK for each queued load's host pages whose storage key is known, before the copy starts."""
        def loading(original: Callable) -> Callable:
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                if self.trace.enabled:
                    for operation in list(cc.load_queue):
                        self._record_load_back(kv_host, operation.host_indices)
                return original(*args, **kwargs)
            return wrapper

        wrap(cc, "start_loading", loading)

    def _record_load_back(self, kv_host: Any, host_indices: Any) -> None:
        slots, keys, digests = [], [], []
        for slot in host_indices.tolist()[:: self.page_size]:
            key = self.slot_keys.get((KV, slot))
            if key is None:
                continue  # a page never read from or written to storage: nothing to compare it with
            slots.append(slot)
            keys.append(key)
            digests.append(tensor_digest(kv_host.get_data_page(slot, flat=True)))
        if slots:
            self.trace.record(EventKind.LOAD_BACK, pool=KV, slots=slots, keys=keys, digests=digests)

    # --- the cache: vote, ACK drain, commit ------------------------------------------------------------

    def tap_unified_cache(self, cache: Any, decision_state: Callable) -> None:
        self.decision_state = decision_state

        def revoking(original: Callable) -> Callable:
            def wrapper(request: Any, *args: Any, **kwargs: Any) -> Any:
                info = cache.ongoing_prefetch.get(request)
                if info is not None and self.ctx.phase != "abort":
                    self.trace.record(EventKind.REVOKE, op=request.rid, step=self.ctx.step, value="hit too short or terminated before its IO")
                result = original(request, *args, **kwargs)
                if info is not None and info.operation.host_indices is None:
                    self._io_finished(request.rid)  # the IO thread never received it
                return result
            return wrapper

        def committing(original: Callable) -> Callable:
            def wrapper(operation: Any) -> Any:
                op = operation.request_id
                before = self.trace.position()
                with self.scheduling(op=op, phase="commit"):
                    result = original(operation)
                if not any(e.kind is EventKind.COMMIT and e.op == op for e in self.trace.events()[before:]):
                    self.trace.record(EventKind.COMMIT, op=op, step=self.ctx.step, value=0)  # discarded whole (nothing inserted)
                return result
            return wrapper

        def inserting(original: Callable) -> Callable:
            def wrapper(node: Any, key: Any, host_value: Any, hash_value: Any, *args: Any, **kwargs: Any) -> Any:
                op = self.ctx.op
                self.trace.record(EventKind.COMMIT, op=op, step=self.ctx.step, value=len(key))
                result = original(node, key, host_value, hash_value, *args, **kwargs)
                if not result.host_insert_dropped:
                    self.inserted(op, host_value[result.prefix_len:].tolist())
                return result
            return wrapper

        def progress(original: Callable) -> Callable:
            def wrapper(request: Any) -> Any:
                with self.scheduling(op=request.rid, phase="check"):
                    return original(request)
            return wrapper

        wrap(cache, "_can_terminate_prefetch", self.deciding)
        wrap(cache, "_all_reduce_attn_groups", self.reducing)
        wrap(cache, "revoke_pending_prefetch", revoking)
        wrap(cache, "_handle_prefetch_result", committing)
        wrap(cache.tree_core, "insert_host", inserting)
        wrap(cache, "check_prefetch_progress", progress)
        wrap(cache, "_sync_hicache_ready_counts", self.phase("ack_drain_min"))

    def on_reduce(self, tensor: Any) -> None:
        """The vote's payload is this rank's own verdict (1: terminate), MAX-reduced."""
        if self.ctx.phase == "vote" and tensor.numel() == 1:
            operation = self.ctx.operation
            self.ctx.voted = True
            self.trace.record(EventKind.VOTE, op=operation.request_id, step=self.ctx.step, value=int(tensor.reshape(-1)[0].item()) == 1,
                              state=self.decision_state(operation))
            self.trace.record(EventKind.COLLECTIVE, step=self.ctx.step, op=self.ctx.op, value=VOTE_COLLECTIVE)
            return
        name = COMMIT_COLLECTIVE if self.ctx.phase == "ack_drain_min" else (self.ctx.phase or "other")
        self.trace.record(EventKind.COLLECTIVE, step=self.ctx.step, op=self.ctx.op, value=name)
