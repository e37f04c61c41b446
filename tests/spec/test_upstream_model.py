"""The model of upstream's decision (spec/upstream.py) differs from the spec in exactly the documented rows."""

from __future__ import annotations

from spec.config import Policy
from spec.decision import DecisionState, decide, enumerate_states, local_vote
from spec.upstream import DEVIATION_CLAUSES, SHAPE_SUMMARY, GuardShape, deviations, matching_shapes, upstream_decision, upstream_vote


def state(**changes) -> DecisionState:
    fields = dict(policy="timeout", page_size=4, hit_pages=2, completed_tokens=8, timed_out=True,
                  pool_transfers_present=True, pool_transfers_done=False, terminated=False)
    fields.update(changes)
    return DecisionState(**fields)


def test_vote_forcing_guard_differs_only_where_the_timeout_meets_a_pending_transfer():
    rows = list(deviations(GuardShape.VOTE_FORCING))
    assert {(d.state.policy, d.state.completed_tokens, d.state.timed_out, d.state.pool_transfers_done) for d in rows} == {
        (Policy.TIMEOUT, 8, True, False)}
    assert len(rows) == 2  # terminated no / yes
    assert all(d.clause == "D5" and d.spec_vote and not d.upstream_vote for d in rows)
    # A peer that already terminated still ends it upstream; on its own the timed-out rank waits.
    assert upstream_decision(state(terminated=True), GuardShape.VOTE_FORCING) is True
    assert upstream_decision(state(), GuardShape.VOTE_FORCING) is False


def test_missing_guard_differs_where_kv_is_complete_and_a_transfer_pending():
    rows = list(deviations(GuardShape.NO_GUARD))
    assert len(rows) == 6
    for d in rows:
        s = d.state
        assert d.clause == "D3" and s.completed_tokens == s.hit_pages * s.page_size and not s.pool_transfers_done
        assert d.upstream_vote and not d.spec_vote
        assert not (s.policy is Policy.TIMEOUT and s.timed_out), "a timed-out rank votes yes either way"


def test_deviation_clauses_match_the_rows():
    for shape in GuardShape:
        assert {d.clause for d in deviations(shape)} == {DEVIATION_CLAUSES[shape][0]}


def test_both_shapes_agree_with_the_spec_everywhere_else():
    for shape in GuardShape:
        differing = {d.state for d in deviations(shape)}
        for s in enumerate_states(4):
            if s not in differing:
                assert upstream_vote(s, shape) == local_vote(s)
    assert upstream_vote(state(policy="best_effort"), GuardShape.VOTE_FORCING) is True


def observed(shape: GuardShape, policies=None) -> dict:
    return {d.state: (d.upstream_vote, d.upstream_decision) for d in deviations(shape)
            if policies is None or d.state.policy.value in policies}


def test_a_run_is_matched_to_the_shape_whose_rows_it_deviates_in():
    for shape in GuardShape:
        assert matching_shapes(observed(shape)) == [shape]
        # Only the policies a run checked count: its timeout rows alone still say which shape.
        assert matching_shapes(observed(shape, ["timeout"]), policies=["timeout"]) == [shape]
    assert matching_shapes({}) == []  # the spec itself is no upstream shape
    one_of_two = dict(list(observed(GuardShape.VOTE_FORCING).items())[:1])
    assert matching_shapes(one_of_two) == []
    assert all(shape in SHAPE_SUMMARY for shape in GuardShape)


def test_the_same_rows_decided_otherwise_match_no_shape():
    # A guard applied after the reduce votes like no guard at all, but decides like the spec: not upstream's shape.
    votes_only = {state: (vote, decide([state])) for state, (vote, _decision) in observed(GuardShape.NO_GUARD).items()}
    assert matching_shapes(votes_only) == []
