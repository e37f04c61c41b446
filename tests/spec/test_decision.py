"""The decision, exhaustively, against an oracle written as the prose rules read."""

import itertools

import pytest

from spec import ConfigError, DecisionState, Policy, combine, combine_payloads, decide, enumerate_states, local_vote, vote_payload
from spec.decision import UNTRACKED_PAYLOAD, collectives_per_check, is_completed

PAGE = 4


def oracle_vote(policy, hit_pages, completed_tokens, timed_out, pools, terminated):
    """The decision's rules as the domain states them (spec/SPEC.md, clauses D1-D5), spelled independently of spec/decision.py."""
    if policy == "best_effort":
        return True
    all_tokens_in = hit_pages > 0 and completed_tokens == hit_pages * PAGE
    extra_pending = pools == "pending"
    completed = all_tokens_in and not extra_pending
    if policy == "wait_complete":
        return completed
    return completed or timed_out


SPACE = list(
    itertools.product(
        ["best_effort", "wait_complete", "timeout"],
        [0, 1, 3],
        ["none", "partial", "full"],
        [False, True],
        ["absent", "pending", "done"],
        [False, True],
    )
)


def make(policy, hit, level, timed_out, pools, terminated):
    completed = {"none": 0, "partial": min(hit * PAGE, PAGE) if hit > 1 else 0, "full": hit * PAGE}[level]
    return DecisionState(
        policy=policy,
        page_size=PAGE,
        hit_pages=hit,
        completed_tokens=completed,
        timed_out=timed_out,
        pool_transfers_present=pools != "absent",
        pool_transfers_done=pools != "pending",
        terminated=terminated,
    )


@pytest.mark.parametrize("case", SPACE, ids=lambda c: "-".join(str(x) for x in c))
def test_vote_matches_oracle_over_the_whole_space(case):
    policy, hit, level, timed_out, pools, terminated = case
    state = make(*case)
    expected = oracle_vote(policy, hit, state.completed_tokens, timed_out, pools, terminated)
    assert local_vote(state) is expected
    # A single rank terminates on its vote, or because it already terminated.
    single = True if policy == "best_effort" else (expected or terminated)
    assert decide([state]) is single


def test_enumerated_space_covers_every_combination_once():
    states = list(enumerate_states(PAGE))
    assert len(states) == len(set(states)) == 3 * (1 * 2 * 3 * 2 + 3 * 2 * 3 * 2)


def test_guard_is_keyed_on_completion_not_on_the_vote():
    # KV complete, extra pool pending, timed out: the guard only clears completion,
    # so the timeout still lets the scheduler stop waiting (the fence then excludes the pool IO).
    state = DecisionState(Policy.TIMEOUT, PAGE, 2, 2 * PAGE, True, True, False, False)
    assert not is_completed(state)
    assert local_vote(state) is True
    waiting = DecisionState(Policy.TIMEOUT, PAGE, 2, 2 * PAGE, False, True, False, False)
    assert local_vote(waiting) is False
    wc = DecisionState(Policy.WAIT_COMPLETE, PAGE, 2, 2 * PAGE, True, True, False, False)
    assert local_vote(wc) is False


def test_no_hit_pages_is_never_completed():
    state = DecisionState(Policy.WAIT_COMPLETE, PAGE, 0, 0, False, False, True, False)
    assert not is_completed(state) and not local_vote(state)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"completed_tokens": 9}, "completed_tokens"),
        ({"hit_pages": -1}, "hit_pages"),
        ({"page_size": 0}, "page_size"),
        ({"policy": "eager"}, "policy"),
        ({"pool_transfers_present": False, "pool_transfers_done": False}, "pool_transfers_done"),
        ({"timed_out": 1}, "timed_out"),
    ],
)
def test_bad_state_rejected(kwargs, field):
    base = dict(policy="timeout", page_size=PAGE, hit_pages=2, completed_tokens=0, timed_out=False,
                pool_transfers_present=True, pool_transfers_done=False, terminated=False)
    base.update(kwargs)
    with pytest.raises(ConfigError) as info:
        DecisionState(**base)
    assert info.value.field == field


@pytest.mark.parametrize("ranks", range(1, 9))
def test_combine_over_every_vote_pattern(ranks):
    checked = 0
    for votes in itertools.product([False, True], repeat=ranks):
        for terminated in itertools.product([False, True], repeat=ranks):
            expected = all(votes) or any(terminated)
            assert combine(list(votes), list(terminated)) is expected
            # The wire form: elementwise MAX of [1 - vote, terminated].
            payloads = [vote_payload(v, t) for v, t in zip(votes, terminated)]
            reduced = [max(p[0] for p in payloads), max(p[1] for p in payloads)]
            assert combine_payloads(reduced) is expected
            checked += 1
    assert checked == 4 ** ranks


def test_untracked_rank_forces_termination():
    for votes in itertools.product([False, True], repeat=3):
        payloads = [vote_payload(v, False) for v in votes] + [UNTRACKED_PAYLOAD]
        reduced = [max(p[0] for p in payloads), max(p[1] for p in payloads)]
        assert combine_payloads(reduced) is True


def test_collectives_per_check():
    assert collectives_per_check("best_effort") == 0
    assert collectives_per_check(Policy.WAIT_COMPLETE) == 1
    assert collectives_per_check("timeout") == 1


def test_decide_across_ranks_uses_every_vote():
    done = DecisionState(Policy.WAIT_COMPLETE, PAGE, 2, 2 * PAGE, False, True, True, False)
    pending = DecisionState(Policy.WAIT_COMPLETE, PAGE, 2, 2 * PAGE, False, True, False, False)
    assert decide([done, done]) is True
    assert decide([done, pending]) is False
    stopped = DecisionState(Policy.WAIT_COMPLETE, PAGE, 2, 2 * PAGE, False, True, False, True)
    assert decide([pending, stopped]) is True


def test_decide_rejects_mixed_policies_and_empty():
    a = DecisionState(Policy.WAIT_COMPLETE, PAGE, 0, 0, False, False, True, False)
    b = DecisionState(Policy.TIMEOUT, PAGE, 0, 0, False, False, True, False)
    with pytest.raises(ConfigError, match="the same policy on every rank"):
        decide([a, b])
    with pytest.raises(ConfigError):
        decide([])
    with pytest.raises(ConfigError):
        combine([True], [True, False])
    with pytest.raises(ConfigError):
        combine_payloads([0])
