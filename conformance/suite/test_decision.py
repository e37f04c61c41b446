"""The decision: every state of the spec's decision table, placed in a real operation.

Each state becomes a real prefetch operation of the implementation
(make_operation); its own can_terminate_prefetch must reach the answer of the
architecture profile it declares (spec/profiles.py: the vote per check for
this spec's caches and SGLang's fork, the ACK drain's own vote for 0.5.2x).
"Timed out" is placed by the operation's start time on the injected clock
(where the profile's timer starts), never by a flag.
"""

from __future__ import annotations

import math

import pytest

from conformance.report import decision_rows
from conformance.oracles.outcome import assert_no_violations
from spec.config import Policy, TerminationConfig
from spec.decision import DecisionState, combine, enumerate_states
from spec.divergences import suffix as divergence_suffix
from spec.profiles import Profile, TimerStart
from spec.timeout import timeout_budget
from spec.trace import EventKind

POLICIES = [p.value for p in Policy]
VOTING_POLICIES = [p.value for p in Policy if p.uses_collective]


def describe(state: DecisionState) -> str:
    pools = "absent" if not state.pool_transfers_present else ("done" if state.pool_transfers_done else "pending")
    return (
        f"{state.policy.value}, hit {state.hit_pages} pages, completed {state.completed_tokens} tokens, "
        f"timed out {state.timed_out}, pool transfers {pools}, terminated {state.terminated}"
    )


def decision_clause(profile: Profile, state: DecisionState) -> str:
    """The clause a wrong decision breaks: the vote's clause, or the combine's (X1) when only the combine differs."""
    return profile.vote_clause(state) if profile.vote(state) == profile.decide([state])[0] else profile.combine_clause


# Binary fractions: start + budget is exact, so "exactly at the deadline" is exact on the clock.
EXACT_TIMEOUTS = dict(timeout_base_s=2.0, timeout_per_ki_token_s=0.5, timeout_max_s=30.0)


AT_THE_DEADLINE = "exactly at the deadline"


def placements(state: DecisionState, config: TerminationConfig, now: float) -> list[tuple[str, float]]:
    """Start times that put `state` on its side of the deadline, far from it, then next to it: (where, start)."""
    deadline_start = now - timeout_budget(config, state.hit_pages)
    assert now - deadline_start == timeout_budget(config, state.hit_pages), "test setup: the deadline is not exact on the clock"
    if state.timed_out:
        return [("a second past the deadline", deadline_start - 1.0), ("one tick past the deadline", math.nextafter(deadline_start, -math.inf))]
    return [("just started", now), ("one tick before the deadline", math.nextafter(deadline_start, math.inf)), (AT_THE_DEADLINE, deadline_start)]


def timer_clause(profile: Profile, state: DecisionState, seen: list[tuple[str, bool | None]]) -> str | None:
    """When the cache's own timed-out verdict (its VOTE's state) is off somewhere: T2 if only exactly at the deadline, else T1.

    `>=` for `>` is wrong exactly at the deadline and nowhere else; a budget
    that is off moves the deadline, so the verdict is wrong one tick before or
    past it, or further. Judged where the deadline counts from the
    operation's start, as these placements do.
    """
    if profile.timer_start is not TimerStart.OPERATION_START or state.policy is not Policy.TIMEOUT:
        return None  # only the timeout policy keeps a timer
    wrong = [where for where, timed_out in seen if timed_out is not None and timed_out != state.timed_out]
    if not wrong:
        return None
    return profile.boundary_clause if wrong == [AT_THE_DEADLINE] else "T1"


def start_for(state: DecisionState, config: TerminationConfig, now: float) -> float:
    return placements(state, config, now)[0][1]


def votes_since(trace, seq: int) -> list:
    return [e for e in trace.events() if e.kind is EventKind.VOTE and e.seq >= seq]


@pytest.mark.clause("D1", "D2", "D3", "D4", "D5", "T1", "T2", "X1", "A1", "A2", "A3", "R1", "R2")
@pytest.mark.parametrize("policy", POLICIES)
def test_every_decision_state(impl, make_cache, clock, trace, policy, request, profile, page_size):
    config = TerminationConfig(policy=policy, page_size=page_size, **EXACT_TIMEOUTS)
    cache = make_cache(termination=config)
    states = [s for s in enumerate_states(page_size) if s.policy.value == policy]
    assert states, f"the spec enumerates no state for {policy}"
    wrong, rows = [], []
    for state in states:
        want = profile.decide([state])[0]
        results, seen = [], []
        for where, start in placements(state, config, clock.now()):
            mark = len(trace.events())
            got = bool(cache.can_terminate(cache.make_operation(state, start_time=start)))
            votes = votes_since(trace, mark)
            results.append((where, got, bool(votes[-1].value) if votes else None))
            seen.append((where, votes[-1].state.timed_out if votes and votes[-1].state is not None else None))
        # Wrong only next to the deadline (right further from it): the boundary is off.
        boundary_only = results[0][1] == want and any(got != want for _, got, _ in results[1:])
        timer = timer_clause(profile, state, seen)
        for where, got, vote in results:
            vote_wrong = vote is not None and vote != profile.vote(state)
            clause = timer or (profile.boundary_clause if boundary_only else decision_clause(profile, state))
            if got != want or vote_wrong:
                # A wrong vote breaks the vote's clause, whatever the decision then was.
                row_clause = profile.vote_clause(state) if vote_wrong and not boundary_only and not timer else clause
                rows.append(decision_rows.row(state, where=where, clause=row_clause, expected_vote=profile.vote(state), got_vote=vote,
                                              expected_decision=want, got_decision=got))
            if got != want:
                wrong.append(f"{clause}: {describe(state)}, {where}: {impl.name} decided {'terminate' if got else 'wait'}, "
                             f"its profile ({profile.id}) {'terminate' if want else 'wait'}"
                             + divergence_suffix(state, vote if vote is not None else got))
    # The report lists the rows that disagree, and which upstream shape disagrees in exactly those.
    request.node.user_properties.append(decision_rows.rows_property(policy, rows, profile.id))
    assert not wrong, f"{len(wrong)} decisions against the {profile.id} profile ({len(states)} states):\n" + "\n".join(wrong)
    # The votes it recorded (what entered the reduce) agree with the spec too.
    assert_no_violations(trace.trace(), config, clauses=["D"])


@pytest.mark.clause("X3")
@pytest.mark.parametrize("policy", VOTING_POLICIES)
def test_guard_enters_the_vote_before_the_reduce(impl, make_cache, clock, trace, policy, page_size):
    """With transfers pending, one rank's decision is the combine of the vote it contributed: nothing overrides it after the reduce.

    Whether that vote is the spec's is D3/D5's question (test_every_decision_state);
    this test fails only when the decision contradicts the vote that entered the collective.
    """
    config = TerminationConfig(policy=policy, page_size=page_size, **EXACT_TIMEOUTS)
    cache = make_cache(termination=config)
    pending = [s for s in enumerate_states(page_size) if s.policy.value == policy and s.pool_transfers_present and not s.pool_transfers_done]
    wrong = []
    for state in pending:
        mark = len(trace.events())
        decided = bool(cache.can_terminate(cache.make_operation(state, start_time=start_for(state, config, clock.now()))))
        votes = votes_since(trace, mark)
        assert votes, f"trace contract: {impl.name} recorded no VOTE for {describe(state)}"
        vote = bool(votes[-1].value)
        if decided != combine([vote], [state.terminated]):
            wrong.append(f"X3: {describe(state)}: the vote entering the reduce was {'yes' if vote else 'no'}, yet this one rank "
                         f"decided {'terminate' if decided else 'wait'}: the guard acts after the reduce")
    assert not wrong, "\n".join(wrong)


@pytest.mark.clause("T2", "T1", "D5", "A1", "A3", "R1")
def test_timeout_boundary_is_strict(impl, make_cache, clock, profile, page_size):
    config = TerminationConfig(policy="timeout", page_size=page_size, **EXACT_TIMEOUTS)
    cache = make_cache(termination=config)
    budget = timeout_budget(config, 2)
    now = clock.now()
    at_deadline = now - budget
    assert now - at_deadline == budget, "test setup: the deadline is not exactly representable"
    partial = dict(policy="timeout", page_size=page_size, hit_pages=2, completed_tokens=page_size,
                   pool_transfers_present=False, pool_transfers_done=True, terminated=False)
    op = cache.make_operation(DecisionState(timed_out=False, **partial), start_time=at_deadline)
    boundary = profile.boundary_clause
    assert cache.can_terminate(op) is False, f"{boundary}: {impl.name} timed out an operation at exactly its deadline ({budget}s elapsed); the spec needs strictly more"
    just_past = math.nextafter(at_deadline, -math.inf)
    op = cache.make_operation(DecisionState(timed_out=True, **partial), start_time=just_past)
    if cache.can_terminate(op) is True:
        return
    # Still waiting just past the spec's deadline: a boundary of its own, or a longer budget (T1 judges budgets).
    far = cache.make_operation(DecisionState(timed_out=True, **partial), start_time=now - (100 * budget + 100))
    longer = cache.can_terminate(far) is True
    assert not longer, f"T1: {impl.name} kept waiting one clock tick past the spec's {budget}s deadline and times out later: its budget is longer than the spec's"
    assert False, f"{boundary}: {impl.name} did not time out an operation one clock tick past its {budget}s deadline"


@pytest.mark.clause("T1", "D5", "A1", "R1")
@pytest.mark.parametrize(
    "base, per_ki_at_4, cap, elapsed, timed_out",
    [
        # per_ki_at_4: the per-1024-token rate at 4-token pages, scaled to the implementation's page size so that
        # a 2-page hit's budget stays the same. 2 pages: uncapped budget 1.0 + 256 * 8/1024 = 3.0, capped at 2.0
        pytest.param(1.0, 256.0, 2.0, 2.5, True, id="capped-past-max"),
        pytest.param(1.0, 256.0, 2.0, 1.5, False, id="capped-before-max"),
        # uncapped budget 1.0 + 64 * 8/1024 = 1.5: the per-token term counts
        pytest.param(1.0, 64.0, 2.0, 1.25, False, id="per-token-term-counts"),
        pytest.param(1.0, 64.0, 2.0, 1.75, True, id="past-per-token-budget"),
    ],
)
def test_timeout_budget(impl, make_cache, clock, base, per_ki_at_4, cap, elapsed, timed_out, page_size):
    per_ki = per_ki_at_4 * 4 / page_size
    tokens = 2 * page_size
    config = TerminationConfig(policy="timeout", page_size=page_size, timeout_base_s=base, timeout_per_ki_token_s=per_ki, timeout_max_s=cap)
    cache = make_cache(termination=config)
    budget = timeout_budget(config, 2)
    assert (elapsed > budget) == timed_out, "test setup disagrees with the spec's budget"
    state = DecisionState(policy="timeout", page_size=page_size, hit_pages=2, completed_tokens=page_size, timed_out=timed_out,
                          pool_transfers_present=False, pool_transfers_done=True, terminated=False)
    got = cache.can_terminate(cache.make_operation(state, start_time=clock.now() - elapsed))
    uncapped = base + per_ki * tokens / 1024
    why = ""
    if not got and cap < elapsed < uncapped:
        ignored = (getattr(impl, "ignored_fields", None) or {}).get("timeout_max_s")
        why = (f": timeout_max_s is accepted and ignored ({'; '.join(ignored)})" if ignored
               else f": no cap (its budget looks like {base} + {per_ki} * {tokens}/1024 = {uncapped}s)")
    assert got is timed_out, (
        f"T1: {impl.name} {'terminated' if got else 'kept waiting for'} a partial prefetch {elapsed}s after its start; "
        f"the budget is min({cap}, {base} + {per_ki} * {tokens}/1024) = {budget}s{why}"
    )
