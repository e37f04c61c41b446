"""The decision: when the scheduler may stop waiting for a prefetch.

A pure function over an explicit state record. The safety question (what may
be inserted once stopped) is the fence's, in spec/fence.py: the decision only
says when to stop waiting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

from spec.config import Policy, require_positive_int
from spec.errors import ConfigError


@dataclass(frozen=True)
class DecisionState:
    """What one rank knows about one operation when the scheduler checks it.

    hit_pages is the number of pages the operation still expects (0 until the
    hit query has run). completed_tokens is the KV progress the IO thread has
    published. pool_transfers_done is True when there are no pool transfers.
    """

    policy: Policy
    page_size: int
    hit_pages: int
    completed_tokens: int
    timed_out: bool
    pool_transfers_present: bool
    pool_transfers_done: bool
    terminated: bool

    def __post_init__(self) -> None:
        object.__setattr__(self, "policy", Policy.parse(self.policy))
        require_positive_int("page_size", self.page_size)
        _require_count("hit_pages", self.hit_pages)
        _require_count("completed_tokens", self.completed_tokens)
        if self.completed_tokens > self.hit_pages * self.page_size:
            raise ConfigError(
                "completed_tokens",
                self.completed_tokens,
                f"an integer <= hit_pages * page_size ({self.hit_pages * self.page_size})",
            )
        for name in ("timed_out", "pool_transfers_present", "pool_transfers_done", "terminated"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(name, getattr(self, name), "True or False")
        if not self.pool_transfers_present and not self.pool_transfers_done:
            raise ConfigError(
                "pool_transfers_done",
                self.pool_transfers_done,
                "True when pool_transfers_present is False (no transfers means done)",
            )


def is_completed(state: DecisionState) -> bool:
    """D2 and D3: every hit token arrived and, where pool transfers exist, they are done."""
    if state.hit_pages == 0:
        return False
    kv_complete = state.completed_tokens == state.hit_pages * state.page_size
    if kv_complete and state.pool_transfers_present and not state.pool_transfers_done:
        return False
    return kv_complete


def local_vote(state: DecisionState) -> bool:
    """This rank's vote: True means "I may stop waiting"."""
    if state.policy is Policy.BEST_EFFORT:
        return True
    completed = is_completed(state)
    if state.policy is Policy.WAIT_COMPLETE:
        return completed
    return completed or state.timed_out


def vote_clause(state: DecisionState) -> str:
    """The clause that settles this state's vote, for reports and the doc table."""
    if state.policy is Policy.BEST_EFFORT:
        return "D1"
    if state.hit_pages == 0:
        return "D2" if not (state.policy is Policy.TIMEOUT and state.timed_out) else "D5"
    kv_complete = state.completed_tokens == state.hit_pages * state.page_size
    if kv_complete and state.pool_transfers_present and not state.pool_transfers_done:
        return "D3" if not (state.policy is Policy.TIMEOUT and state.timed_out) else "D5"
    return "D4" if state.policy is Policy.WAIT_COMPLETE else "D5"


# --- the cross-rank combine (clauses X1, X2) -------------------------------

VOTE_COLLECTIVE = "vote_max"


def vote_payload(vote: bool, terminated: bool) -> tuple[int, int]:
    """What each rank contributes to the one MAX all-reduce: [1 - vote, terminated]."""
    return (1 - int(vote), int(terminated))


# A rank that no longer tracks an operation still joins the collective (X4):
# it reports "terminated", which forces its peers to stop too.
UNTRACKED_PAYLOAD = vote_payload(True, True)


def combine_payloads(reduced: Sequence[int]) -> bool:
    """Read the MAX-reduced payload: every rank voted yes, or any rank terminated."""
    if len(reduced) != 2:
        raise ConfigError("reduced", list(reduced), "two integers [max(1 - vote), max(terminated)]")
    no_votes, any_terminated = reduced
    return no_votes == 0 or any_terminated == 1


def combine(votes: Sequence[bool], terminated: Sequence[bool]) -> bool:
    """X1: terminate iff every rank votes yes or any rank has already terminated."""
    if len(votes) != len(terminated) or not votes:
        raise ConfigError("ranks", (len(votes), len(terminated)), "one vote and one terminated flag per rank, at least one rank")
    payloads = [vote_payload(v, t) for v, t in zip(votes, terminated)]
    reduced = [max(p[0] for p in payloads), max(p[1] for p in payloads)]
    return combine_payloads(reduced)


def collectives_per_check(policy: Policy) -> int:
    """X2: one vote collective per check under wait_complete and timeout, none under best_effort."""
    return 1 if Policy.parse(policy).uses_collective else 0


def decide(states: Sequence[DecisionState]) -> bool:
    """The decision every rank reaches for one operation, given each rank's state."""
    if not states:
        raise ConfigError("states", [], "one DecisionState per rank, at least one")
    policies = {s.policy for s in states}
    if len(policies) != 1:
        raise ConfigError("policy", sorted(p.value for p in policies), "the same policy on every rank")
    return decide_cast(states[0].policy, [local_vote(s) for s in states], [s.terminated for s in states])


def decide_cast(policy: Policy, votes: Sequence[bool], terminated: Sequence[bool]) -> bool:
    """The decision from the votes the ranks cast: best_effort terminates at once (D1), the others combine (X1)."""
    if policy is Policy.BEST_EFFORT:
        return True
    return combine(votes, terminated)


# --- the decision space, enumerated -----------------------------------------

COMPLETION_LEVELS = ("none", "partial", "full")
POOL_STATES = ("absent", "pending", "done")
EXAMPLE_HIT_PAGES = 2


def enumerate_states(page_size: int = 4) -> Iterator[DecisionState]:
    """Every combination of the decision's inputs, with concrete numbers.

    hit_pages is 0 (hit query not run) or EXAMPLE_HIT_PAGES; completion is none,
    partial (one page) or full; pool transfers absent, pending or done.
    """
    for policy in Policy:
        for hit_pages in (0, EXAMPLE_HIT_PAGES):
            levels = COMPLETION_LEVELS if hit_pages else ("none",)
            for level in levels:
                completed = {"none": 0, "partial": page_size, "full": hit_pages * page_size}[level]
                for timed_out in (False, True):
                    for pools in POOL_STATES:
                        for terminated in (False, True):
                            yield DecisionState(
                                policy=policy,
                                page_size=page_size,
                                hit_pages=hit_pages,
                                completed_tokens=completed,
                                timed_out=timed_out,
                                pool_transfers_present=pools != "absent",
                                pool_transfers_done=pools != "pending",
                                terminated=terminated,
                            )


def completion_level(state: DecisionState) -> str:
    if state.completed_tokens == 0:
        return "none"
    if state.completed_tokens == state.hit_pages * state.page_size:
        return "full"
    return "partial"


def pool_state(state: DecisionState) -> str:
    if not state.pool_transfers_present:
        return "absent"
    return "done" if state.pool_transfers_done else "pending"


def _require_count(field: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(field, value, "an integer >= 0")
