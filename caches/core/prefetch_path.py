"""The prefetch path on the scheduler's side: start, commit through the fence, abort.

Each cache decides *when* to stop waiting in its own `can_terminate_prefetch`
and `check_prefetch_progress`; *what* may then enter the tree is decided
here, once, by the spec's fence (spec/fence.py): terminate and snapshot under
the operation's lock, clamp to every ALL_PAGES pool, agree the length across
ranks, insert only finished slots, free the rest now or when their IO ends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from caches.core.arguments import checked_request_id, checked_request_ids, checked_tokens
from caches.core.hashing import page_hashes
from caches.core.operation import PoolPlan, PrefetchOperation, Progress
from caches.core.tree import TreeNode
from caches.errors import CacheArgumentError
from spec.decision import UNTRACKED_PAYLOAD, VOTE_COLLECTIVE, DecisionState
from spec.fence import COMMIT_COLLECTIVE, HitPolicy, commit_payload, committable_pages, read_commit, untracked_commit_payload
from spec.trace import HOST, EventKind

if TYPE_CHECKING:
    from caches.core.cache_base import HierarchicalCache


class PrefetchPath:
    def prefetch_from_storage(self: "HierarchicalCache", request_id: str, tokens: Sequence[int]) -> int:
        """Queue a prefetch of the full pages of `tokens` beyond the deepest backed-up match.

        Returns the tokens requested (0 when nothing was queued: too short,
        over the prefetch capacity, or no host room even after eviction).
        """
        tokens = self._prefetch_arguments(request_id, tokens)
        ps = self.page_size
        node = self.tree.match_prefix(tokens).deepest_backed_up_node
        start = self.tree.depth(node)
        pages = (len(tokens) - start) // ps
        pages = min(pages, (self.config.prefetch_capacity_tokens - self.prefetch_tokens_occupied) // ps)
        if pages < self.config.prefetch_threshold_pages:
            return 0
        # The anchor is pinned before room is made: host eviction must never take
        # the node this prefetch will hang its pages below.
        self.tree.pin_host(node)
        try:
            op = self._make_prefetch(request_id, tokens[start:], node, pages)
        except BaseException:
            self.tree.unpin_host(node)
            raise
        if op is None:
            self.tree.unpin_host(node)
            return 0
        self.ongoing_prefetch[request_id] = op
        self.prefetch_tokens_occupied += len(op.tokens)
        self.stats.prefetches_started += 1
        self.controller.submit_prefetch(op)
        return len(op.tokens)

    def _prefetch_arguments(self: "HierarchicalCache", request_id: str, tokens: Sequence[int]) -> list[int]:
        self._ensure_usable("prefetch_from_storage")
        checked_request_id(request_id)
        if request_id in self.ongoing_prefetch:
            raise CacheArgumentError("request_id", request_id, "an id with no prefetch in flight")
        return checked_tokens(tokens)

    def _make_prefetch(self: "HierarchicalCache", request_id: str, missing: list[int], node: TreeNode, pages: int) -> PrefetchOperation | None:
        """Host slots up front (a shortfall shrinks the prefetch to what fits), then the operation; None if too little fits."""
        ps = self.page_size
        host = self.allocators[(HOST, "kv")]
        if host.free_slots() < pages * ps:
            self.copies.wait()  # settle thread-timed frees first, as _alloc does
        if host.free_slots() < pages * ps:
            self._evict_host(pages * ps - host.free_slots())
            self.copies.wait()
        pages = min(pages, host.free_slots() // ps)
        if pages < self.config.prefetch_threshold_pages:
            return None
        wanted = missing[: pages * ps]
        hashes = page_hashes(wanted, ps, prev=node.last_hash)
        started = self.clock.now()
        self.trace.record(
            EventKind.OP_START,
            op=request_id,
            value={"policy": self.prefetch_stop_policy, "start": started, "page_size": ps, "requested_pages": pages},
        )
        slots = self._alloc(HOST, "kv", pages * ps, op=request_id)
        assert slots is not None  # room was made above
        extras = [PoolPlan(pool, self.host_pools[pool].spec.hit_policy, slots, "kv") for pool in self.token_pools if pool != "kv"]
        for pool in self.state_pools:
            state = self._alloc(HOST, "state", 1, op=request_id)
            if state is not None:
                extras.append(PoolPlan(pool, HitPolicy.TRAILING_PAGES, state, "state", per_page=False))
        op = PrefetchOperation(
            request_id,
            requested_hashes=hashes,
            kv=PoolPlan("kv", HitPolicy.ALL_PAGES, slots, "kv"),
            extras=extras,
            page_size=ps,
            start_time=started,
            trace=self.trace,
            free_slots=self._free_host_from_op,
            last_node=node,
        )
        op.tokens = wanted
        return op

    def release_aborted_request(self: "HierarchicalCache", request_id: str) -> None:
        """The request is gone: stop its prefetch and return every slot (F8)."""
        self._ensure_usable("release_aborted_request")
        self._abort_prefetch(checked_request_id(request_id))

    def _abort_prefetch(self: "HierarchicalCache", request_id: str) -> None:
        op = self.ongoing_prefetch.get(request_id)
        if op is None:
            return
        op.terminate(None)
        self.trace.record(EventKind.REVOKE, op=request_id, value="abort")
        self.trace.record(EventKind.COMMIT, op=request_id, value=0)
        op.release_idle()
        self._finish_prefetch(op)

    # --- helpers for each cache's check_prefetch_progress -------------------------

    def _checked_request_ids(self: "HierarchicalCache", request_ids: Sequence[str]) -> list[str]:
        """check_prefetch_progress's one argument rule, the same in every cache."""
        self._ensure_usable("check_prefetch_progress")
        return checked_request_ids(request_ids)

    def _begin_step(self: "HierarchicalCache") -> int:
        self._step += 1
        self.trace.record(EventKind.STEP, step=self._step)
        self.copies.poll()
        self._drain_finished_ops(self._step)
        return self._step

    def _drain_finished_ops(self: "HierarchicalCache", step: int | None) -> None:
        """Free slots of ended operations once their last IO ended, at an agreed step.

        One MIN collective every step (a fixed count, so ranks never disagree on
        how many collectives a step runs): the ranks free their ended operations
        together once every rank's are idle.
        """
        idle = int(all(not op.has_in_flight() for op in self._draining))
        if self.reducer.all_reduce_min([idle], name="drain_min", step=step)[0]:
            for op in self._draining:
                op.drain()
            self._draining = []

    def _record_vote(self: "HierarchicalCache", op: PrefetchOperation, progress: Progress, vote: bool, timed_out: bool) -> None:
        if not self.trace.enabled:
            return
        state = DecisionState(
            policy=self.termination.policy,
            page_size=self.page_size,
            hit_pages=len(progress.hash_value),
            completed_tokens=progress.completed_tokens,
            timed_out=timed_out,
            pool_transfers_present=progress.pool_transfers_present,
            pool_transfers_done=progress.pool_transfers_done,
            terminated=progress.terminated,
        )
        # `seen`: where in the trace the snapshot was taken; IO ending after it was not seen by this vote.
        self.trace.record(EventKind.VOTE, op=op.request_id, step=self._step, value=bool(vote), state=state, seen=getattr(progress, "trace_position", None))

    def _join_untracked(self: "HierarchicalCache", request_id: str, step: int) -> None:
        """X4: a request this rank no longer tracks still joins its collectives, neutrally."""
        if self.termination.policy.uses_collective:
            self.reducer.all_reduce_max(list(UNTRACKED_PAYLOAD), name=VOTE_COLLECTIVE, op=request_id, step=step)
        self.reducer.all_reduce_min(untracked_commit_payload(len(self.state_pools)), name=COMMIT_COLLECTIVE, op=request_id, step=step)

    def _commit_prefetch(self: "HierarchicalCache", op: PrefetchOperation, step: int) -> int:
        """The fence: returns the tokens committed to the tree (the same on every rank)."""
        progress = op.terminate(step)  # F1 + F2
        kv_pages = min(progress.completed_tokens // self.page_size, len(progress.hash_value))
        local = committable_pages(kv_pages, progress.pool_progress)  # F3
        loaded_states = {p.name: p.completed_pages for p in progress.pool_progress if p.hit_policy is HitPolicy.TRAILING_PAGES}
        payload = commit_payload(local, [loaded_states.get(pool, 0) for pool in self.state_pools])
        decision = read_commit(self.reducer.all_reduce_min(payload, name=COMMIT_COLLECTIVE, op=op.request_id, step=step))
        agreed = decision.pages
        attach = {pool for pool, ok in zip(self.state_pools, decision.trailing_attached) if ok}  # F4, on every rank
        tokens = agreed * self.page_size
        self.trace.record(EventKind.COMMIT, op=op.request_id, step=step, value=tokens)
        if agreed:
            self._insert_prefetched(op, progress, agreed, attach)
        op.release_idle()  # F5: in-flight slots are freed by whoever ends their IO
        self._finish_prefetch(op)
        self.stats.storage_hit_tokens += tokens
        self.stats.prefetches_committed += 1
        return tokens

    def _insert_prefetched(self: "HierarchicalCache", op: PrefetchOperation, progress: Progress, pages: int, attach: set[str]) -> TreeNode:
        count = pages * self.page_size
        kv_slots = op.plan("kv").slots[:count]
        result = self.tree.insert_host(op.last_node, op.tokens[:count], kv_slots, list(progress.hash_value[:pages]))
        duplicates = set(result.duplicate_slots.tolist())
        inserted = [s for s in kv_slots.tolist() if s not in duplicates]
        for pool in self.token_pools:
            op.take_for_insert(pool, inserted)
            self.trace.record(EventKind.INSERT, op=op.request_id, pool=pool, space=HOST, slots=inserted)
        if duplicates:
            for pool in self.token_pools:
                op.release(pool, sorted(duplicates))
        node = result.node
        for plan in op.pool_transfers:
            if plan.pool in attach:
                self._attach_prefetched_state(op, node, plan)
        return node

    def _attach_prefetched_state(self: "HierarchicalCache", op: PrefetchOperation, node: TreeNode, plan: PoolPlan) -> bool:
        ref = self.states(node).setdefault(plan.pool, self._new_state_ref())
        if ref.host is not None or node.host_value is None:
            return False  # the node already carries a state: ours is released with the rest
        slot = int(plan.slots[0])
        op.take_for_insert(plan.pool, [slot])
        self.trace.record(EventKind.INSERT, op=op.request_id, pool=plan.pool, space=HOST, slots=[slot])
        ref.host = slot
        return True

    def _finish_prefetch(self: "HierarchicalCache", op: PrefetchOperation) -> None:
        # Scheduler thread, agreed point: free what is idle now; the rest once its IO ended.
        # Read in-flight first: IO ending between the two calls releases slots after the drain.
        in_flight = op.has_in_flight()
        op.drain()
        if in_flight:
            self._draining.append(op)
        self.tree.unpin_host(op.last_node)
        self.ongoing_prefetch.pop(op.request_id, None)
        self.prefetch_tokens_occupied -= len(op.tokens)

