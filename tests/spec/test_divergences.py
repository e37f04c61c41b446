"""Divergences: recognized by the state alone, exactly the documented design, and judged apart from defects."""

from __future__ import annotations

from dataclasses import replace

from spec.clauses import CATALOGUE
from spec.decision import enumerate_states
from spec.divergences import DIVERGENCES, LANDED_KV_WAITS, MARKER, explains, marker, suffix
from spec.profiles import VOTE_PER_CHECK
from spec.upstream import GuardShape, upstream_vote
from spec.verdicts import Outcome, Verdict, verdict


def test_the_vote_forcing_guard_differs_from_the_spec_only_in_the_divergence_rows_and_no_guard_in_none():
    for state in enumerate_states(4):
        # Before the guard, KV completion alone ended the wait while a pool still wrote: a defect (D3), never a divergence.
        assert explains(state, upstream_vote(state, GuardShape.NO_GUARD)) is None, state
        theirs, ours = upstream_vote(state, GuardShape.VOTE_FORCING), VOTE_PER_CHECK.vote(state)
        found = explains(state, theirs)
        if found is not None:
            assert ours is True and theirs is False, state
        if theirs != ours:
            assert found is LANDED_KV_WAITS, f"upstream's vote-forcing guard differs in a row no divergence documents: {state}"


def test_only_a_no_vote_past_the_deadline_with_kv_landed_and_a_pool_pending_is_the_divergence():
    landed = next(s for s in enumerate_states(4) if explains(s, False))
    assert explains(landed, True) is None, "a yes vote is the spec's own"
    assert explains(replace(landed, timed_out=False), False) is None, "before the deadline the spec waits too"
    assert explains(replace(landed, completed_tokens=landed.completed_tokens - 1), False) is None, "KV not landed: a defect"
    assert explains(replace(landed, pool_transfers_done=True), False) is None, "nothing pending: nothing to hold for"
    assert explains(replace(landed, hit_pages=0, completed_tokens=0), False) is None, "no hit: nothing landed"
    assert explains(None, False) is None and suffix(None, False) == ""
    assert MARKER.search(suffix(landed, False)).group(1) == LANDED_KV_WAITS.id == MARKER.search(marker(LANDED_KV_WAITS)).group(1)


def test_every_divergence_names_catalogue_clauses_and_both_sides_evidence():
    for d in DIVERGENCES.values():
        assert d.clauses and all(c in CATALOGUE for c in d.clauses), d.id
        assert d.upstream_evidence and d.spec_evidence and d.spec_rule and d.upstream_rule, d.id


def test_a_divergent_outcome_is_a_divergence_verdict_never_a_defect():
    d5 = CATALOGUE["D5"]
    assert verdict(d5, "vote_per_check", Outcome.DIVERGE) is Verdict.DIVERGENCE
    assert verdict(d5, "vote_per_check", Outcome.FAIL) is Verdict.DEFECT
    # A clause of another profile stays not applicable, divergent or not.
    assert verdict(CATALOGUE["A1"], "vote_per_check", Outcome.DIVERGE) is Verdict.NOT_APPLICABLE
