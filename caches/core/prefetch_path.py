"""The prefetch path on the scheduler's side: start a prefetch, track it, end it.

`start` (behind the cache's `prefetch_from_storage`) finds where the
prefetch attaches (the deepest backed-up match, pinned so host eviction
cannot take it), takes host slots up front (a shortfall shrinks the
prefetch to what fits), builds the PrefetchOperation (caches/core/operation.py)
and hands it to the storage controller's threads (caches/core/controller.py).
Each scheduler check (caches/core/scheduler_step.py) then decides per
operation whether to stop waiting, and the commit (caches/core/commit.py)
inserts what the fence allows. Ended operations whose IO still runs wait
here, in `draining`, until every rank's IO into them ended (F5).
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from caches.core.arguments import checked_request_id, checked_tokens
from caches.core.hashing import page_hashes
from caches.core.operation import PoolPlan, PrefetchOperation
from caches.core.parts import CorePart, CoreParts
from caches.core.reducer import Reducer
from caches.core.slots import KV_GROUP, STATE_GROUP
from caches.core.tree import TreeNode
from caches.errors import CacheArgumentError, CacheTimeoutError
from spec.fence import HitPolicy, window_pages
from spec.trace import HOST, EventKind


class PrefetchPath(CorePart):
    def __init__(
        self,
        parts: CoreParts,
        *,
        reducer: Reducer,
        submit: Callable[[PrefetchOperation], None],
        operation_class: type[PrefetchOperation] = PrefetchOperation,
    ) -> None:
        super().__init__(parts)
        self.reducer = reducer
        self._submit = submit
        self.operation_class = operation_class
        self.ongoing: dict[str, PrefetchOperation] = {}
        self.draining: list[PrefetchOperation] = []  # ended, with IO still in flight
        self.tokens_occupied = 0

    # --- starting -------------------------------------------------------------------

    def start(self, request_id: str, tokens: Sequence[int]) -> int:
        """Queue a prefetch of the full pages of `tokens` beyond the deepest backed-up match.

        Returns the tokens requested (0 when nothing was queued: too short,
        over the prefetch capacity, or no host room even after eviction).
        """
        checked_request_id(request_id)
        if request_id in self.ongoing:
            raise CacheArgumentError("request_id", request_id, "an id with no prefetch in flight")
        tokens = checked_tokens(tokens)
        ps = self.page_size
        anchor = self.hooks.prefetch_anchor(self.tree.match_prefix(tokens))
        start = self.tree.depth(anchor)
        pages = (len(tokens) - start) // ps
        pages = min(pages, (self.config.prefetch_capacity_tokens - self.tokens_occupied) // ps)
        if pages < self.config.prefetch_threshold_pages:
            return 0
        # The anchor is pinned before room is made: host eviction must never take
        # the node (or the cache's data on it) that this prefetch hangs its pages below.
        self.tree.pin_host(anchor)
        self.hooks.pin_prefetch_anchor(request_id, anchor)
        try:
            op = self._make(request_id, tokens[start:], anchor, pages)
        except BaseException:
            self._unpin(request_id, anchor)
            raise
        if op is None:
            self._unpin(request_id, anchor)
            return 0
        self.ongoing[request_id] = op
        self.tokens_occupied += len(op.tokens)
        self.stats.prefetches_started += 1
        self._submit(op)
        return len(op.tokens)

    def _make(self, request_id: str, missing: list[int], anchor: TreeNode, pages: int) -> PrefetchOperation | None:
        """Host slots up front (a shortfall shrinks the prefetch to what fits), then the operation; None if too little fits."""
        ps = self.page_size
        pages = min(pages, self.slots.ensure_free(HOST, KV_GROUP, pages * ps) // ps)
        if pages < self.config.prefetch_threshold_pages:
            return None
        # A window pool's pages for the window before the end (whole, or the prefetch is not worth it: F10).
        windows: dict[str, torch.Tensor] = {}
        for pool in self.pools.window_pools:
            size = min(window_pages(self.pools.host[pool].spec.window_tokens, ps), pages) * ps
            window = self.slots.alloc(HOST, pool, size, op=request_id)
            if window is None:
                for taken, got in windows.items():
                    self.slots.release(HOST, taken, got)
                    self.trace.record(EventKind.FREE, op=request_id, pool=taken, space=HOST, slots=got)
                return None
            windows[pool] = window
        wanted = missing[: pages * ps]
        hashes = page_hashes(wanted, ps, prev=anchor.last_hash)
        started = self.clock.now()
        self.trace.record(
            EventKind.OP_START,
            op=request_id,
            value={"policy": self.config.termination.policy.value, "start": started, "page_size": ps, "requested_pages": pages,
                   "io_timeout_s": self.config.io_timeout_s, "window_pools": list(windows), "state_pools": list(self.pools.state_pools)},
        )
        slots = self.slots.alloc(HOST, KV_GROUP, pages * ps, op=request_id)
        assert slots is not None  # room was made above
        host = self.pools.host
        extras = [PoolPlan(pool, host[pool].spec.hit_policy, slots, KV_GROUP) for pool in self.pools.token_pools if pool != "kv"]
        for pool in self.pools.state_pools:
            state = self.slots.alloc(HOST, STATE_GROUP, 1, op=request_id)
            if state is not None:
                extras.append(PoolPlan(pool, HitPolicy.TRAILING_PAGES, state, STATE_GROUP, per_page=False))
        extras += [PoolPlan(pool, HitPolicy.TRAILING_WINDOW, window, pool) for pool, window in windows.items()]
        op = self.operation_class(
            request_id,
            requested_hashes=hashes,
            kv=PoolPlan("kv", HitPolicy.ALL_PAGES, slots, KV_GROUP),
            extras=extras,
            page_size=ps,
            start_time=started,
            trace=self.trace,
            free_slots=self._free_from_op,
            last_node=anchor,
            clock=self.clock,
        )
        op.tokens = wanted
        return op

    def _free_from_op(self, group: str, slots: list[int]) -> None:
        # Called by PrefetchOperation.drain(), on the scheduler thread only.
        self.slots.release(HOST, group, slots)

    def _unpin(self, request_id: str, anchor: TreeNode) -> None:
        self.hooks.unpin_prefetch_anchor(request_id, anchor)
        self.tree.unpin_host(anchor)

    # --- while it runs ----------------------------------------------------------------

    def wait_io(self, request_id: str) -> None:
        """Bounded wait until the IO thread starts nothing more for this prefetch (in flight, or ended with IO still running)."""
        checked_request_id(request_id)
        op = self.ongoing.get(request_id) or next((o for o in self.draining if o.request_id == request_id), None)
        if op is None:
            known = sorted({*self.ongoing, *(o.request_id for o in self.draining)})
            raise CacheArgumentError("request_id", request_id, "the id of a prefetch in flight or ending: " + (", ".join(known) or "none"))
        if not op.io_done.wait(self.config.wait_timeout_s):
            raise CacheTimeoutError(f"{self.who}: IO of prefetch {request_id} not done within {self.config.wait_timeout_s}s")

    def expire(self, now: float) -> None:
        """L4: every transfer in flight past io_timeout_s counts as failed (a scheduler check runs this)."""
        for op in self.ongoing.values():
            op.expire_io(now, self.config.io_timeout_s)

    # --- ending -------------------------------------------------------------------------

    def abort(self, request_id: str) -> None:
        """The request is gone: stop its prefetch and return every slot (F8)."""
        op = self.ongoing.get(request_id)
        if op is None:
            return
        op.terminate(None)
        self.trace.record(EventKind.REVOKE, op=request_id, value="abort")
        self.trace.record(EventKind.COMMIT, op=request_id, value=0)
        op.release_idle()
        self.finish(op)

    def finish(self, op: PrefetchOperation) -> None:
        """The operation ended (committed or aborted): free what is idle now, the rest once its IO ended."""
        # Scheduler thread, agreed point. Read in-flight first: IO ending between
        # the two calls releases slots after the drain, which a later drain frees.
        in_flight = op.has_in_flight()
        op.drain()
        if in_flight:
            self.draining.append(op)
        self._unpin(op.request_id, op.last_node)
        self.ongoing.pop(op.request_id, None)
        self.tokens_occupied -= len(op.tokens)

    def drain_finished(self, step: int | None) -> None:
        """Free slots of ended operations once their last IO ended, at an agreed step.

        One MIN collective every step (a fixed count, so ranks never disagree on
        how many collectives a step runs): the ranks free their ended operations
        together once every rank's are idle.
        """
        idle = int(all(not op.has_in_flight() for op in self.draining))
        if self.reducer.all_reduce_min([idle], name="drain_min", step=step)[0]:
            for op in self.draining:
                op.drain()
            self.draining = []

    def abort_all(self) -> None:
        for request_id in list(self.ongoing):
            self.abort(request_id)

    def drain_after_close(self) -> None:
        """The threads are gone, so no IO is in flight: free what is left, locally."""
        for op in self.draining:
            op.drain()
        self.draining = []
