"""Architecture profiles: where an implementation decides completion, agreement and the timeout.

Behavioural clauses (safety, liveness, agreement) and hardening clauses judge
every implementation end to end, from its trace and its bytes. Mechanism
clauses pin down how one architecture decides; an implementation declares the
profile it follows (with evidence: where its code decides), is judged by that
profile's mechanism clauses, and the mechanism clauses of other profiles are
not applicable to it. Four profiles exist:

- vote_per_check: SGLang's fork (HiRadixCache, UnifiedRadixCache,
  HiMambaRadixCache up to 9e9fde147). Every check of an unfinished prefetch
  casts a local vote (can_terminate_prefetch), one MAX all-reduce of
  [1 - vote, terminated] agrees it, and the timeout counts from the
  operation's start.
- ack_drain: SGLang 0.5.2x's UnifiedRadixCache. The IO thread's progress
  arrives as ACKs that a sync thread MIN-reduces across ranks; the scheduler's
  drain commits an operation at its final ACK, with no vote. The check's vote
  (_can_terminate_prefetch) decides only the timeout: never yes under
  wait_complete, under timeout yes once the deadline passed unless KV has
  landed, MAX-reduced (any rank past its deadline ends the wait); the deadline
  counts from the first check that found the operation unfinished.
- drain_vote: SGLang 0.5.19/0.5.20's HiRadixCache. The ACK drain commits
  completion (as ack_drain's); each check casts the policy alone
  (can_terminate_prefetch: best_effort yes, wait_complete no, timeout once
  the deadline from the operation's start passed, landed KV or not), and
  one MAX all-reduce of [terminated or vote] agrees it on every policy: any
  rank's yes ends the wait for all.
- fenced_vote: this project's caches. The fork's vote per check with the
  spec's fence: terminate and the progress snapshot under one lock (F2).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum
from typing import Callable, Sequence

from spec.config import Policy
from spec.decision import DecisionState, decide_cast, local_vote, vote_clause
from spec.errors import ConfigError


class TimerStart(str, Enum):
    OPERATION_START = "operation_start"
    FIRST_BLOCKED_CHECK = "first_blocked_check"


@dataclass(frozen=True)
class Profile:
    id: str
    title: str
    summary: str
    timer_start: TimerStart
    # One rank's vote in a state, and the clause that settles it.
    vote: Callable[[DecisionState], bool]
    vote_clause: Callable[[DecisionState], str]
    # Each rank's decision from the votes and terminated flags every rank has.
    decisions: Callable[[Policy, Sequence[bool], Sequence[bool]], tuple[bool, ...]]
    combine_clause: str  # the clause a decision that does not follow from the votes breaks
    # Vote collectives one check of an operation runs on each vote group (tracked, not terminated).
    collectives: Callable[[Policy], int]
    collectives_clause: str
    boundary_clause: str  # the clause of the deadline's exact boundary
    # Whether a complete operation's vote is yes (False: the ACK drain commits it and the vote stays no).
    votes_completion: bool = True

    def counterpart(self, clause_id: str) -> str:
        """The clause that judges, under this profile, what clause_id (a vote-per-check decision clause) judges there.

        A harness check written for the vote per check names its failure through this, so that under the
        ACK drain it names A1-A3 instead of a clause that is not applicable there.
        """
        if clause_id in ("D1", "D2", "D3", "D4", "D5"):
            return clause_id if self.vote_clause is vote_clause else self.vote_clause(None)  # type: ignore[arg-type]
        return {"X1": self.combine_clause, "X2": self.collectives_clause, "T2": self.boundary_clause}.get(clause_id, clause_id)

    def decide(self, states: Sequence[DecisionState]) -> tuple[bool, ...]:
        """Each rank's decision, given each rank's state."""
        if not states:
            raise ConfigError("states", [], "one DecisionState per rank, at least one")
        return self.decisions(states[0].policy, [self.vote(s) for s in states], [s.terminated for s in states])


def _vote_decisions(policy: Policy, votes: Sequence[bool], terminated: Sequence[bool]) -> tuple[bool, ...]:
    return (decide_cast(policy, votes, terminated),) * len(votes)


def _vote_collectives(policy: Policy) -> int:
    return 1 if Policy.parse(policy).uses_collective else 0


def kv_landed(state: DecisionState) -> bool:
    return state.hit_pages > 0 and state.completed_tokens == state.hit_pages * state.page_size


def pool_pending(state: DecisionState) -> bool:
    return state.pool_transfers_present and not state.pool_transfers_done


def is_complete(state: DecisionState) -> bool:
    """KV landed and no pool transfer pending: the operation is done."""
    return kv_landed(state) and not pool_pending(state)


def ack_drain_vote(state: DecisionState) -> bool:
    """A1: best_effort yes; wait_complete no (the drain commits); timeout: past the deadline, unless done (the drain commits it)."""
    if state.policy is Policy.BEST_EFFORT:
        return True
    if state.policy is Policy.WAIT_COMPLETE:
        return False
    return state.timed_out and not is_complete(state)


def _ack_drain_decisions(policy: Policy, votes: Sequence[bool], terminated: Sequence[bool]) -> tuple[bool, ...]:
    """A2: a terminated operation ends; otherwise best_effort ends, timeout ends if any rank's vote is yes (MAX)."""
    if len(votes) != len(terminated) or not votes:
        raise ConfigError("ranks", (len(votes), len(terminated)), "one vote and one terminated flag per rank, at least one rank")
    policy = Policy.parse(policy)
    by_vote = policy is Policy.BEST_EFFORT or (policy is Policy.TIMEOUT and any(votes))
    return tuple(t or by_vote for t in terminated)


def _ack_drain_collectives(policy: Policy) -> int:
    return 1 if Policy.parse(policy) is Policy.TIMEOUT else 0


def drain_vote(state: DecisionState) -> bool:
    """R1: the policy alone; completion is the drain's to commit."""
    if state.policy is Policy.BEST_EFFORT:
        return True
    if state.policy is Policy.WAIT_COMPLETE:
        return False
    return state.timed_out


def _any_rank_decisions(policy: Policy, votes: Sequence[bool], terminated: Sequence[bool]) -> tuple[bool, ...]:
    """R2: one MAX of [terminated or vote]: every rank ends the wait when any rank's is yes."""
    if len(votes) != len(terminated) or not votes:
        raise ConfigError("ranks", (len(votes), len(terminated)), "one vote and one terminated flag per rank, at least one rank")
    return (any(t or v for v, t in zip(votes, terminated)),) * len(votes)


VOTE_PER_CHECK = Profile(
    id="vote_per_check",
    title="vote per check (SGLang's fork)",
    summary="every check casts a local vote (can_terminate_prefetch) and one MAX all-reduce of [1 - vote, terminated] agrees it; "
            "the deadline counts from the operation's start",
    timer_start=TimerStart.OPERATION_START,
    vote=local_vote, vote_clause=vote_clause, decisions=_vote_decisions, combine_clause="X1",
    collectives=_vote_collectives, collectives_clause="X2", boundary_clause="T2",
)

# The same decision as the fork's; the fence (F2: terminate and snapshot under one lock) is this spec's own mechanism.
FENCED_VOTE = replace(
    VOTE_PER_CHECK,
    id="fenced_vote",
    title="vote per check, fenced commit (this spec)",
    summary="the vote per check, with the spec's fence: terminate and the progress snapshot under one lock, "
            "the commit clamped to every pool, slots under IO freed when it ends",
)

ACK_DRAIN = Profile(
    id="ack_drain",
    title="ACK drain (SGLang 0.5.2x)",
    summary="the drain commits an operation at its final ACK (MIN-reduced across ranks by a sync thread); the check votes only "
            "the timeout (never under wait_complete; under timeout past the deadline unless the operation is done, MAX-reduced); "
            "the deadline counts from the first check that found the operation unfinished",
    timer_start=TimerStart.FIRST_BLOCKED_CHECK,
    vote=ack_drain_vote, vote_clause=lambda state: "A1", decisions=_ack_drain_decisions, combine_clause="A2",
    collectives=_ack_drain_collectives, collectives_clause="A2", boundary_clause="A3", votes_completion=False,
)

DRAIN_VOTE = Profile(
    id="drain_vote",
    title="policy vote, ACK-drain commit (SGLang 0.5.19/0.5.20)",
    summary="the drain commits an operation at its final ACK; each check votes the policy alone (best_effort yes, wait_complete no, "
            "timeout past the deadline from the operation's start) and one MAX all-reduce of [terminated or vote] per check, on "
            "every policy, ends the wait on every rank when any rank's is yes",
    timer_start=TimerStart.OPERATION_START,
    vote=drain_vote, vote_clause=lambda state: "R1", decisions=_any_rank_decisions, combine_clause="R2",
    collectives=lambda policy: 1, collectives_clause="R2", boundary_clause="T2",
)

PROFILES: dict[str, Profile] = {p.id: p for p in (FENCED_VOTE, VOTE_PER_CHECK, ACK_DRAIN, DRAIN_VOTE)}
VOTE_PROFILES = (VOTE_PER_CHECK.id, FENCED_VOTE.id)
DEFAULT_PROFILE = FENCED_VOTE.id  # an implementation that declares none is judged as the spec's own architecture


def profile(profile_id: str | Profile | None) -> Profile:
    if isinstance(profile_id, Profile):
        return profile_id
    if profile_id is None:
        return PROFILES[DEFAULT_PROFILE]
    try:
        return PROFILES[profile_id]
    except KeyError:
        raise ConfigError("profile", profile_id, "one of " + ", ".join(PROFILES)) from None
