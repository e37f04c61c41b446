"""Each scheduler check's decisions, judged against the spec on every rank before anything waits on a peer.

A rank whose decision deviates makes its peers wait: for a terminate that
never comes, in a commit collective that never completes, or for IO of an
operation that was never ended. Reported as the hang or the leak that
follows, the failure would hide the rule that broke. So after every check
each rank publishes, per agreed id, the vote it recorded, the state it saw,
whether it tracked the id and what it decided, through the launch's store
(never a collective); a terminate is published the moment it is recorded,
before the commit collective a peer might never join. Then every rank
gathers every rank's records and, on a deviation, stops the scenario naming
the clause: the vote's (D1-D5) when a recorded vote is not the spec's, else
X1 when a decision is not the combine of the votes cast.
"""

from __future__ import annotations

import datetime
import pickle
from dataclasses import dataclass
from typing import Any, Mapping

from spec.divergences import suffix as divergence_suffix
from spec.config import Policy
from spec.decision import DecisionState, pool_state
from spec.profiles import VOTE_PROFILES, Profile
from conformance.errors import ConformanceFailure


class DecisionDeviation(ConformanceFailure):
    """A check's decision on some rank is not the spec's (the message names the clause)."""


@dataclass(frozen=True)
class CheckDecision:
    """One rank's part in one check, for one agreed id."""

    tracked: bool  # False: this rank no longer tracks the id and joins neutrally (X4)
    decided: bool  # terminated at this check
    vote: bool | None = None  # the VOTE it recorded (None: none recorded)
    state: DecisionState | None = None


def describe(state: DecisionState) -> str:
    return (f"{state.policy.value}, hit {state.hit_pages} pages, completed {state.completed_tokens} tokens, "
            f"{'timed out' if state.timed_out else 'not timed out'}, pool transfers {pool_state(state)}, "
            f"{'terminated' if state.terminated else 'not terminated'}")


def _verb(decided: bool) -> str:
    return "terminate" if decided else "wait"


def decision_problems(label: str, op: str, by_rank: Mapping[int, CheckDecision], profile: Profile) -> list[str]:
    """What is wrong with one id's decisions at one check under the declared profile, as '<clause>: ...' messages (empty: conforms)."""
    tracked = {rank: d for rank, d in sorted(by_rank.items()) if d.tracked}
    if not tracked:
        return []
    if any(d.vote is None or d.state is None for d in tracked.values()):
        decided = {rank: d.decided for rank, d in tracked.items()}
        if len(set(decided.values())) > 1:
            detail = ", ".join(f"rank {rank}: {_verb(v)}" for rank, v in decided.items())
            return [f"{profile.combine_clause}: at {label}, the ranks tracking {op} decided differently ({detail})"]
        return []
    problems = []
    for rank, d in tracked.items():
        want = profile.vote(d.state)
        if d.vote != want:
            clause = profile.vote_clause(d.state)
            if d.state.policy is Policy.TIMEOUT and d.state.timed_out and not d.vote and want:
                clause += "/L2"  # a rank past its deadline votes yes: L2's rule too
            problems.append(f"{clause}: at {label}, rank {rank} voted {'yes' if d.vote else 'no'} on {op} "
                            f"where the spec votes {'yes' if want else 'no'} ({describe(d.state)})" + divergence_suffix(d.state, d.vote))
    if problems:
        return problems  # the decisions follow from that vote: not X1's failure too
    # The vote per check: untracked ranks join neutrally, contributing [vote yes, terminated] (X4); the ACK drain has no such part.
    neutral = len(by_rank) - len(tracked) if profile.id in VOTE_PROFILES else 0
    policy = next(iter(tracked.values())).state.policy
    decisions = profile.decisions(policy, [d.vote for d in tracked.values()] + [True] * neutral,
                                  [d.state.terminated for d in tracked.values()] + [True] * neutral)
    expected_by_rank = dict(zip(tracked, decisions))
    wrong = {rank: d.decided for rank, d in tracked.items() if d.decided != expected_by_rank[rank]}
    if not wrong:
        return []
    cast = ", ".join(f"rank {rank}: vote {'yes' if d.vote else 'no'}, {'terminated' if d.state.terminated else 'not terminated'}"
                     for rank, d in tracked.items())
    cast += f", {neutral} untracked" if neutral else ""
    detail = ", ".join(f"rank {rank} decided {_verb(v)}" for rank, v in wrong.items())
    expected = ", ".join(sorted({_verb(expected_by_rank[rank]) for rank in wrong}))
    return [f"{profile.combine_clause}: at {label}, the votes cast on {op} ({cast}) combine to {expected}, yet {detail}"]


class DecisionExchange:
    """One rank's side of the exchange through the launch's TCP store."""

    def __init__(self, store: Any, rank: int, world_size: int, scenario_index: int, timeout_s: float) -> None:
        self.store = store
        self.rank = rank
        self.world_size = world_size
        self.prefix = f"decisions/{scenario_index}"
        self.timeout = datetime.timedelta(seconds=timeout_s)

    def _key(self, check: str, op: str, rank: int) -> str:
        return f"{self.prefix}/{check}/{op}/rank{rank}"

    def publish(self, check: str, op: str, decision: CheckDecision) -> None:
        self.store.set(self._key(check, op, self.rank), pickle.dumps(decision))

    def gather(self, check: str, op: str) -> dict[int, CheckDecision]:
        keys = [self._key(check, op, rank) for rank in range(self.world_size)]
        self.store.wait(keys, self.timeout)  # bounded; a peer stuck before deciding is the hang detector's to name
        return {rank: pickle.loads(self.store.get(key)) for rank, key in enumerate(keys)}
