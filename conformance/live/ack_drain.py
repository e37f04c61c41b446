"""The ACK-drain seam: driving an upstream cache whose scheduler drain hands prefetches to the IO thread and commits them.

Both the 0.5.19/0.5.20 HiRadixCache and the 0.5.21+ UnifiedRadixCache work
this way: the prefetch thread only queries storage; a scheduler step's drain
(inside check_hicache_events, queue sizes MIN-reduced across ranks)
allocates the hit's host slots and hands the operation to the IO thread;
every batch and the end of the IO are ACKs that a sync thread MIN-reduces
across ranks; the drain commits an operation when its final ACK arrives,
without a terminate. Such a session therefore steps the scheduler until the
drain has taken a new prefetch's hit (so its IO starts, as the harness's
gates expect), lets the sync thread forward every queued ACK before a step
(the order the gates define), and before shutdown steps until every IO has
ended and every ACK and release is drained. The server args are published
as that scheduler publishes them (runtime_context).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Sequence

from conformance.live.configuration import server_args_fields
from conformance.live.runtime import ensure_process_group
from conformance.live.scheduler import ROUNDS
from conformance.live.session import LiveSession
from conformance.live.threads import FORK_THREADS
from spec.trace import EventKind

NO_MODEL = "dummy"  # upstream's own no-model path through ServerArgs.__post_init__


class AckDrainSession(LiveSession):
    """What every ACK-drain session shares; a layout's subclass builds its cache and says how it names a request."""

    THREADS = (*FORK_THREADS, "prefetch_sync_thread")
    acks: Any  # conformance.live.layouts.unified.taps.AckCounts, set by the layout's tap()

    def configure(self, host_ratio: float) -> tuple[Any, Any]:
        """Publish the server args as upstream's scheduler does (runtime_context.publish), then join its process groups (their widths come from it)."""
        args = self.runtime.server_args_cls(model_path=NO_MODEL, tp_size=self.env.world_size,
                                            **server_args_fields(self.env, host_ratio, self.mem_layout()))
        context = self.runtime.module("runtime_context")
        ranks = {"ranks": context.SpawnRanks(world_rank=self.env.rank)} if "ranks" in inspect.signature(context.publish).parameters else {}
        context.publish(args, role="scheduler", **ranks)
        return ensure_process_group(self.runtime, self.env.rank, self.env.world_size), args

    def request(self, request_id: str) -> Any:
        """What the cache's scheduler calls name a request by: an id, or a CacheRequestHandle (one attempt per request here)."""
        if not self._names_by_handle:
            return request_id
        if request_id not in self._handles:
            self._handles[request_id] = self.runtime.module("base_prefix_cache").CacheRequestHandle(request_id, 0)
        return self._handles[request_id]

    @functools.cached_property
    def _names_by_handle(self) -> bool:
        """Read from check_prefetch_progress's parameter (the class's, not the tap's), never from a version: 0.5.19 names
        requests by id, 0.5.20+ by handle, in both ACK-drain layouts."""
        return list(inspect.signature(type(self.cache).check_prefetch_progress).parameters)[1] != "req_id"

    @functools.cached_property
    def _handles(self) -> dict[str, Any]:
        return {}

    def hit_drained(self, request_id: str) -> bool:
        """Whether the drain has taken the prefetch's storage hit (allocated its host slots, or revoked it)."""
        raise NotImplementedError

    def start_prefetch(self, request_id: str, tokens: Sequence[int]) -> int:
        """prefetch_from_storage as the scheduler calls it; the tokens requested (0: none queued)."""
        raise NotImplementedError

    def queued_operation(self, request_id: str) -> Any:
        """The prefetch's operation as the drain queued it for the IO thread (None: none, or revoked)."""
        raise NotImplementedError

    # --- the protocol ------------------------------------------------------------------------------

    def prefetch(self, request_id: str, tokens: Sequence[int]) -> int:
        """prefetch_from_storage, then the scheduler's steps until the ACK drain has taken its hit (allocated it, or revoked it)."""
        requested = self.start_prefetch(request_id, tokens)
        if not requested:
            return 0
        queried = self.queued_operation(request_id)
        self.pump(lambda: self.hit_drained(request_id), f"the ACK drain to take the storage hit of {request_id}")
        # The drain sized the read to the host room it found: what the IO thread reads is the operation's page keys.
        operation = self.queued_operation(request_id)
        if operation is not None and operation.host_indices is not None:
            return len(operation.hash_value) * self.env.page_size
        # Revoked by the drain: for a hit below the threshold the prefetch was queued whole and its query ended it (as the
        # fork's prefetch thread revokes one); without host room for the hit it was never queued for IO.
        return requested if queried is not None and queried.storage_hit_count < self.cache.prefetch_threshold else 0

    def wait_prefetch_io(self, request_id: str) -> None:
        """Wait (bounded) until upstream's IO thread queued the final ACK of the prefetch, and its sync thread forwarded it.

        No scheduler step runs meanwhile: the drain that would commit the
        prefetch is the next check's (or an abort's) to run, as in upstream,
        where the IO thread's progress reaches the scheduler only at its steps.
        """
        taps = self.taps
        raised = len(taps.io_thread_errors)
        with taps.io_done:
            taps.io_done.wait_for(lambda: request_id in taps.ended_ops or request_id not in taps.started_ops
                                  or len(taps.io_thread_errors) > raised, self.env.wait_timeout_s)
        if request_id not in taps.ended_ops and request_id in taps.started_ops:
            dead = self.storage_threads.deaths()  # an exception left _page_transfer: did it end the thread before the final ACK?
            if dead:
                raise AssertionError(f"{'; '.join(dead)} (the IO of {request_id} never sent its final ACK)")
            if not taps.wait_io_done(request_id, self.env.wait_timeout_s):
                raise AssertionError(f"L4: sglang-live: upstream's IO thread did not finish the IO of {request_id} within "
                                     f"{self.env.wait_timeout_s}s ({self.storage_threads.state()})")
        self.settle_acks()

    def pump(self, done: Callable[[], bool], what: str) -> None:
        """check_hicache_events as upstream's scheduler runs it each step, on every rank, until `done` holds on every rank."""
        io_done = self.taps.io_done

        def waiting(timeout_s: float) -> None:
            with io_done:
                io_done.wait_for(done, timeout_s)

        if not self.drive.steps_until_settled(self.cache.check_hicache_events, lambda: not done(), waiting):
            raise AssertionError(f"L4: sglang-live: waited {self.env.wait_timeout_s}s ({ROUNDS} scheduler steps) for {what} "
                                 f"({self.storage_threads.state()})")

    def check_progress(self, request_ids: Sequence[str]) -> dict[str, int]:
        """One scheduler step. The ACK drain may have committed a prefetch in an earlier step (or a flush): its last commit
        counts, once (a later check of the same id, which the scheduler may run for a peer's sake, reports no hit)."""
        finished: dict[str, int] = {}
        self.settle_acks()
        with self.taps.scheduler_step():
            self.cache.check_hicache_events()
            for request_id in request_ids:
                if request_id in self.dropped:
                    continue  # the tree's scheduler dropped the aborted request: it checks nothing of it again
                request = self.request(request_id)
                if self.cache.check_prefetch_progress(request):
                    self.cache.pop_prefetch_loaded_tokens(request)
                    commits = [e for e in self.env.trace.events() if e.kind is EventKind.COMMIT and e.op == request_id]
                    unreported = commits and commits[-1].seq > self._reported_commits.get(request_id, -1)
                    finished[request_id] = int(commits[-1].value) if unreported else 0
                    if commits:
                        self._reported_commits[request_id] = commits[-1].seq
        return finished

    @functools.cached_property
    def _reported_commits(self) -> dict[str, int]:
        """Request -> the sequence number of the last COMMIT a check reported."""
        return {}

    def settle_acks(self) -> None:
        """Wait until upstream's sync thread has forwarded every ACK that every rank's IO thread has queued.

        A step's ACK drain then sees every batch that has landed on every rank
        (the order the harness's gates define), deterministically. The sync
        thread reduces one ACK at a time across ranks, so on each rank it
        forwards exactly as many ACKs as the rank that queued fewest has
        queued: the harness agrees that count (a MIN of its own, on the
        scheduler's thread, where every rank runs it at the same call) and
        waits for it. Every rank calls this at the same points of a scenario.
        """
        taps, acks = self.taps, self.acks
        with taps.io_done:
            queued = acks.queued
        agreed = self.drive.min_over_ranks(queued)
        with taps.io_done:
            settled = taps.io_done.wait_for(lambda: acks.forwarded >= agreed, self.env.wait_timeout_s)
        if not settled:
            raise AssertionError(f"L4: sglang-live: upstream's prefetch sync thread forwarded {acks.forwarded} of the {agreed} ACK(s) "
                                 f"every rank queued within {self.env.wait_timeout_s}s ({self.storage_threads.state()})")

    def abort(self, request_id: str) -> None:
        with self.taps.scheduling(op=request_id, phase="abort"):
            self.cache.release_aborted_request(self.request(request_id))

    def call_on_abort(self, method: str, request_id: str) -> None:
        getattr(self.cache, method)(self.request(request_id))  # this line's cache takes the request's handle

    def evict_all(self) -> None:
        self.settle_acks()
        super().evict_all()

    def close(self) -> None:
        """The scheduler's steps until every prefetch's IO has ended and its ACKs and releases are drained, then upstream's shutdown."""
        if self._closed:
            return
        cc, taps, acks = self.cc, self.taps, self.acks
        io_thread = self.storage_threads

        def io_ended() -> bool:  # a dead IO thread ends nothing more (its death is L5's, reported at teardown)
            return taps.started_ops <= taps.ended_ops or not io_thread.alive("prefetch_io_aux_thread")

        try:
            self.pump(lambda: io_ended() and acks.queued == acks.forwarded
                      and cc.ack_prefetch_queue.empty() and cc.host_mem_release_queue.empty(),
                      "every prefetch's IO to end and its ACKs to be drained before shutdown")
        finally:
            super().close()

    def _settle_before_shutdown(self) -> None:
        """Nothing more: close() stepped the scheduler until every IO ended, or its thread died (which ends none, so
        waiting for it would only spend the wait's bound), and every ACK and release was drained."""
