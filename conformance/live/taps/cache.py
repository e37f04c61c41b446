"""Cache taps: the vote and every collective, the commit and what it inserts, the scheduler phases that run collectives."""

from __future__ import annotations

import copy
from typing import Any, Callable

from conformance.live import calls, collectives
from conformance.live.taps.state import Taps, wrap
from spec.decision import VOTE_COLLECTIVE, DecisionState
from spec.fence import COMMIT_COLLECTIVE
from spec.trace import EventKind

DecisionStateOf = Callable[[Any], "DecisionState | None"]


class Votes:
    """The vote, recorded at its reduce (or at its return where no reduce carries it), and every collective, named.

    The fork's vote payload is [1 - vote, terminated] (MAX-reduced); a
    layout whose payload differs subclasses on_reduce.
    """

    def __init__(self, taps: Taps, decision_state: DecisionStateOf) -> None:
        self.taps = taps
        self.decision_state = decision_state
        taps.votes = self

    def deciding(self, original: Callable) -> Callable:
        """Wraps the decision method."""
        taps = self.taps

        def wrapper(operation: Any) -> Any:
            ctx = taps.ctx
            saved = (ctx.op, ctx.phase, ctx.voted, ctx.operation)
            ctx.op, ctx.phase, ctx.voted, ctx.operation = operation.request_id, "vote", False, operation
            try:
                with collectives.active(taps):
                    result = original(operation)
                if not ctx.voted:  # no reduce carried the vote: best_effort, or one rank that skips it
                    self._vote_at_return(original, operation, bool(result))
                return result
            finally:
                ctx.op, ctx.phase, ctx.voted, ctx.operation = saved
        return wrapper

    def reducing(self, original: Callable) -> Callable:
        """Wraps a reduce method of the cache (HiRadixCache._all_reduce_attn_groups)."""
        def wrapper(tensor: Any, op: Any) -> Any:
            self.on_reduce(tensor)
            return original(tensor, op)
        return wrapper

    def record_vote(self, vote: bool) -> None:
        ctx = self.taps.ctx
        ctx.voted = True
        self.taps.trace.record(EventKind.VOTE, op=ctx.operation.request_id, step=ctx.step, value=vote, state=self.decision_state(ctx.operation))

    def own_verdict(self, tensor: Any) -> bool:
        """A vote whose payload is this rank's own verdict (one element, 1 votes yes), recorded with its collective;
        False where the payload is no such vote."""
        ctx = self.taps.ctx
        if ctx.phase != "vote" or tensor.numel() != 1:
            return False
        self.record_vote(int(tensor.reshape(-1)[0].item()) == 1)
        self.taps.trace.record(EventKind.COLLECTIVE, step=ctx.step, op=ctx.op, value=VOTE_COLLECTIVE)
        return True

    def on_reduce(self, tensor: Any) -> None:
        """This rank enters an all-reduce: in the vote, its payload [1 - vote, terminated] is the vote."""
        ctx = self.taps.ctx
        name = ctx.phase or "other"
        if ctx.phase == "vote" and tensor.numel() == 2:
            self.record_vote(int(tensor[0].item()) == 0)
            name = VOTE_COLLECTIVE
        elif ctx.phase == "commit":
            name = COMMIT_COLLECTIVE
        self.taps.trace.record(EventKind.COLLECTIVE, step=ctx.step, op=ctx.op, value=name)

    def on_barrier(self) -> None:
        ctx = self.taps.ctx
        name = "abort_barrier" if ctx.phase == "abort" else "barrier"
        self.taps.trace.record(EventKind.COLLECTIVE, step=ctx.step, op=ctx.op, value=name)

    def _vote_at_return(self, decide: Callable, operation: Any, decided: bool) -> None:
        """Record the vote of a decision that no reduce carried.

        best_effort returns before any reduce: its decision is its vote. One rank
        that skips the reduce returns `vote or terminated`: for an operation
        already terminated the vote is upstream's own decision on a copy not
        marked terminated (the copy enters no collective: there is none on one
        rank); where that cannot be made, the vote is recorded without a state.
        """
        state = self.decision_state(operation)
        vote = decided
        if state is not None and state.terminated and self.taps.termination.policy.uses_collective:
            probe = copy.copy(operation)
            flag = calls.terminated_flag(probe)
            if flag is not None:
                setattr(probe, flag, False)
                vote = bool(decide(probe))
            else:
                state = None
        self.taps.trace.record(EventKind.VOTE, op=operation.request_id, step=self.taps.ctx.step, value=vote, state=state)


def tap_fork_cache(taps: Taps, cache: Any, decision_state: DecisionStateOf, votes_cls: type[Votes] = Votes) -> Votes:
    """The fork's cache: can_terminate_prefetch (and its reduce), _insert_helper_host, and the phases whose collectives it
    names; votes_cls reads the vote off the reduce's payload (the fork's [1 - vote, terminated] by default)."""
    votes = votes_cls(taps, decision_state)

    def progress(original: Callable) -> Callable:
        def wrapper(req_id: str) -> Any:
            with taps.scheduling(op=req_id, phase="commit"):
                return original(req_id)
        return wrapper

    wrap(cache, "can_terminate_prefetch", votes.deciding)
    if hasattr(cache, "_all_reduce_attn_groups"):
        wrap(cache, "_all_reduce_attn_groups", votes.reducing)
    tap_insert_helper_host(taps, cache)
    wrap(cache, "check_prefetch_progress", progress)
    wrap(cache, "writing_check", taps.phase("write_ack_min"))
    wrap(cache, "loading_check", taps.phase("load_ack_min"))
    if hasattr(cache, "drain_storage_control_queues"):  # from 2025-09 (before it no release queue to drain)
        wrap(cache, "drain_storage_control_queues", taps.phase("drain_queues_min"))
    return votes


def tap_insert_helper_host(taps: Taps, cache: Any) -> None:
    """COMMIT (the length handed to the tree) and INSERT (the host slots the tree took) at _insert_helper_host, which
    returns the length it already held (the fork's UnifiedRadixCache: an InsertResult with it as prefix_len)."""
    def inserting(original: Callable) -> Callable:
        def wrapper(node: Any, key: Any, host_value: Any, hash_value: Any, *args: Any, **kwargs: Any) -> Any:
            op = taps.ctx.op
            taps.trace.record(EventKind.COMMIT, op=op, step=taps.ctx.step, value=len(key))
            saved, taps.ctx.inserting = taps.ctx.inserting, op
            try:
                result = original(node, key, host_value, hash_value, *args, **kwargs)
            finally:
                taps.ctx.inserting = saved
            matched = getattr(result, "prefix_len", result)
            taps.inserted(op, host_value[matched:].tolist())
            return result
        return wrapper

    wrap(cache, "_insert_helper_host", inserting)


def tap_barrier(taps: Taps, cache: Any, name: str) -> None:
    """A barrier method of the cache (release_aborted_request runs one)."""
    def barrier(original: Callable) -> Callable:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            taps.on_barrier()
            return original(*args, **kwargs)
        return wrapper

    wrap(cache, name, barrier)
