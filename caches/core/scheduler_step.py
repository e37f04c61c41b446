"""One scheduler step: `check_prefetch_progress`'s loop, once for every cache.

A step runs over the agreed, ordered list of request ids every rank passes
(L3, X4): it begins (STEP; finished copies applied; ended operations whose
IO ended on every rank freed; transfers past their bound counted as failed,
L4), then for each id either joins the collectives neutrally (a request this
rank no longer tracks) or asks the cache's own `can_terminate_prefetch` and,
when it says stop, commits through the fence (caches/core/commit.py).
The decision is each cache's own code; the loop around it is not, so it
cannot drift between caches.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from caches.core.commit import PrefetchCommit
from caches.core.copies import CopyTracker
from caches.core.operation import PrefetchOperation
from caches.core.prefetch_path import PrefetchPath
from caches.core.reducer import Reducer
from spec.clock import Clock
from spec.config import TerminationConfig
from spec.errors import ConfigError
from spec.decision import UNTRACKED_PAYLOAD, VOTE_COLLECTIVE, DecisionState
from spec.fence import COMMIT_COLLECTIVE, untracked_commit_payload
from spec.trace import EventKind, TraceRecorder

Decide = Callable[[PrefetchOperation], bool]


class SchedulerStep:
    def __init__(
        self,
        *,
        termination: TerminationConfig,
        trace: TraceRecorder,
        clock: Clock,
        reducer: Reducer,
        copies: CopyTracker,
        prefetches: PrefetchPath,
        commit: PrefetchCommit,
        trailing_pools: int,
    ) -> None:
        self.termination = termination
        self.trace = trace
        self.clock = clock
        self.reducer = reducer
        self.copies = copies
        self.prefetches = prefetches
        self.commit = commit
        self.trailing_pools = trailing_pools
        self.step = 0

    def check(self, request_ids: Sequence[str], can_terminate: Decide) -> dict[str, int]:
        """One step over the agreed request ids; {id: committed tokens} of those that finished."""
        step = self.begin()
        finished: dict[str, int] = {}
        for request_id in request_ids:
            op = self.prefetches.ongoing.get(request_id)
            if op is None:
                self.join_untracked(request_id, step)
                continue
            if can_terminate(op):
                finished[request_id] = self.commit.commit(op, step)
        return finished

    def begin(self) -> int:
        self.step += 1
        self.trace.record(EventKind.STEP, step=self.step)
        self.copies.poll()
        self.prefetches.drain_finished(self.step)
        self.prefetches.expire(self.clock.now())  # read after STEP: the bound is judged at the check (L4)
        return self.step

    def join_untracked(self, request_id: str, step: int) -> None:
        """X4: a request this rank no longer tracks still joins its collectives, neutrally."""
        if self.termination.policy.uses_collective:
            self.reducer.all_reduce_max(list(UNTRACKED_PAYLOAD), name=VOTE_COLLECTIVE, op=request_id, step=step)
        self.reducer.all_reduce_min(untracked_commit_payload(self.trailing_pools), name=COMMIT_COLLECTIVE, op=request_id, step=step)

    def record_vote(self, op: PrefetchOperation, progress: Any, vote: bool, timed_out: bool) -> None:
        """The VOTE event: this rank's vote and the state it was computed from (the decision's own code calls it)."""
        if not self.trace.enabled:
            return
        try:
            state = DecisionState(
                policy=self.termination.policy,
                page_size=self.termination.page_size,
                hit_pages=len(progress.hash_value),
                completed_tokens=progress.completed_tokens,
                timed_out=timed_out,
                pool_transfers_present=progress.pool_transfers_present,
                pool_transfers_done=progress.pool_transfers_done,
                terminated=progress.terminated,
            )
        except ConfigError:
            # Progress outside the decision's domain (more tokens than the hit): the vote is recorded without
            # a state, which no decision clause can judge; what the cache does next is judged as it happens.
            state = None
        # `seen`: where in the trace the snapshot was taken; IO ending after it was not seen by this vote.
        self.trace.record(EventKind.VOTE, op=op.request_id, step=self.step, value=bool(vote), state=state, seen=getattr(progress, "trace_position", None))
