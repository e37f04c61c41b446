"""Upstream's decision, modelled: where SGLang's can_terminate_prefetch and this spec differ.

A model written from reading upstream's code (see the clause evidence in
spec/clauses.py), not upstream's code. It exists so the spec can say exactly,
row by row of the decision table, where upstream decides otherwise, and so the
conformance report can check that a run of upstream's real decision code
deviates in exactly those rows and no others.

Two shapes of the extra-pool guard have existed upstream:
- NO_GUARD: before the guard (HiRadixCache until 991689fd0): KV completion alone
  is completion. Unsafe: it stops while a pool transfer still writes.
- VOTE_FORCING: the guard as PR #27550 wrote it, `if completed and <pending>:
  can_terminate = False` after the policy branches. Safe but unbounded: under
  timeout a pending pool transfer vetoes "timed out".
This spec's form (D3) sets the completion predicate instead.
"""

from __future__ import annotations

from enum import Enum
from typing import Iterable, Iterator, Mapping, NamedTuple

from spec.config import Policy
from spec.decision import DecisionState, decide, decide_cast, enumerate_states, local_vote, vote_clause


class GuardShape(str, Enum):
    NO_GUARD = "no_guard"
    VOTE_FORCING = "vote_forcing"


# The clause a deviation breaks, per shape: what the conformance run must name.
DEVIATION_CLAUSES = {
    GuardShape.NO_GUARD: ("D3",),
    GuardShape.VOTE_FORCING: ("D5", "L2"),
}


def upstream_vote(state: DecisionState, shape: GuardShape) -> bool:
    """The local vote upstream's can_terminate_prefetch casts (before the reduce)."""
    if state.policy is Policy.BEST_EFFORT:
        return True
    kv_complete = state.hit_pages > 0 and state.completed_tokens == state.hit_pages * state.page_size
    vote = kv_complete if state.policy is Policy.WAIT_COMPLETE else kv_complete or state.timed_out
    pending = state.pool_transfers_present and not state.pool_transfers_done
    if GuardShape(shape) is GuardShape.VOTE_FORCING and kv_complete and pending:
        vote = False
    return vote


def upstream_decision(state: DecisionState, shape: GuardShape) -> bool:
    """One rank's decision under upstream's shape (the same MAX combine)."""
    return decide_cast(state.policy, [upstream_vote(state, shape)], [state.terminated])


class Deviation(NamedTuple):
    state: DecisionState
    clause: str
    spec_vote: bool
    upstream_vote: bool
    spec_decision: bool
    upstream_decision: bool


def deviations(shape: GuardShape, page_size: int = 4) -> Iterator[Deviation]:
    """Every decision-table state whose local vote upstream casts differently."""
    for state in enumerate_states(page_size):
        ours, theirs = local_vote(state), upstream_vote(state, shape)
        if ours != theirs:
            yield Deviation(state, vote_clause(state), ours, theirs,
                            decide_cast(state.policy, [ours], [state.terminated]),
                            upstream_decision(state, shape))


# What a run whose votes deviate in exactly one shape's rows is, in words (the report's).
SHAPE_SUMMARY = {
    GuardShape.NO_GUARD: "upstream before its extra-pool guard (HiRadixCache at 991689fd0~1): KV completion alone ends the wait while pool IO is still writing",
    GuardShape.VOTE_FORCING: "upstream's vote-forcing guard (PR #27550): timeout cannot end the wait while pool IO is pending",
}


def matching_shapes(observed: Mapping[DecisionState, tuple[bool | None, bool]], policies: Iterable[Policy | str] | None = None,
                    page_size: int = 4) -> list[GuardShape]:
    """The upstream shapes that disagree with the spec in exactly the rows a run observed, the same way.

    `observed` maps each decision-table state (page size `page_size`) where a
    run's recorded vote or its decision differed from the spec's to that
    (vote, decision); `policies` are the policies whose rows the run checked
    (all when None). Empty when no shape matches (the spec itself is none).
    """
    checked = {Policy.parse(p) for p in policies} if policies is not None else set(Policy)
    seen = {state: tuple(got) for state, got in observed.items() if state.policy in checked}
    out = []
    for shape in GuardShape:
        model = {}
        for state in enumerate_states(page_size):
            if state.policy not in checked:
                continue
            got = (upstream_vote(state, shape), upstream_decision(state, shape))
            if got != (local_vote(state), decide([state])):
                model[state] = got
        if model == seen:
            out.append(shape)
    return out
