"""F2 where it hides: IO moves between a progress snapshot and its use.

The scheduler is held right after it lets go of the operation's lock at the
end of a snapshot (conformance/scenarios/snapshot_holds.py), and IO moves
there. A vote must be the spec's vote for the snapshot it recorded; a
commit must be what had ended at its terminate mark. Each scenario varies
what a bug needs to hide behind: which field the IO changes (the KV
progress, the expected hit after a failed batch, the extra pools' done
flag), and which snapshot is held (the vote's, or one the commit takes
before its terminate mark).

An implementation whose operation locks are not the recorder's shows no
snapshot's end: these tests skip for it, saying so.
"""

from __future__ import annotations

import threading

import pytest

from conformance.bounds import WAIT_S
from conformance.scenarios.races import close_and_check_trace, fence_tokens, key_files, page_write_keys, remove_files, served, stored_request
from conformance.scenarios.snapshot_holds import SnapshotHoldTrace, SnapshotRelease, moved_between
from conformance.scenarios.workload import drive, pass_deadline
from spec.config import TerminationConfig
from spec.timeout import timeout_budget
from spec.trace import LOAD, Event, EventKind

PAGES = 4
BATCH = 2
NO_HOLD_POINT = "its operation locks are not the recorder's (spec/fence_lock.py): no snapshot shows where it ends, so none can be held"


@pytest.fixture
def trace(clock, profile) -> SnapshotHoldTrace:
    """The harness's recorder, whose operation locks say where each snapshot ends."""
    return SnapshotHoldTrace(clock, profile=profile.id)


def started(pool_is_kv: bool, nth: int, trace) -> callable:
    """r1's nth load of KV (pool_is_kv) or of an extra pool, held before its storage call (which may raise, and then never lands)."""

    def ours(e: Event) -> bool:
        return e.kind is EventKind.IO_START and e.value == LOAD and e.op == "r1" and (e.pool == "kv") == pool_is_kv

    return lambda e: ours(e) and sum(1 for x in trace.events() if x.seq <= e.seq and ours(x)) == nth


def moving(trace, hold) -> callable:
    """The action at the held snapshot's end: the held IO goes on, and the test waits until r1's IO thread is done with it."""

    def move(_: SnapshotRelease) -> None:
        hold.release()
        trace.wait_for_event(EventKind.IO_DONE, "r1", WAIT_S)

    return move


def pools(state) -> str:
    if not state.pool_transfers_present:
        return "no pool transfers"
    return f"pool transfers {'done' if state.pool_transfers_done else 'pending'}"


def describe(events) -> str:
    return ", ".join(f"#{e.seq} {e.kind.value}" + (f" {e.pool}" if e.pool else "") for e in events)


# --- the vote ------------------------------------------------------------------------------

def own_decision(cache, state, config: TerminationConfig, now: float) -> bool:
    """The implementation's decision of `state` alone, through its decision probe: a vote equal to it read its snapshot,
    and a wrong one is the decision's clause (D*), not the snapshot's (F2)."""
    start = now - timeout_budget(config, state.hit_pages) - 1.0 if state.timed_out else now
    return bool(cache.can_terminate(cache.make_operation(state, start_time=start)))


MOVES = {
    # KV alone (no extra pool guard to mask it): the last KV batch ends in the gap, completing KV.
    "last_kv_batch": "the last KV batch ends",
    # KV alone: the last batch's pages are gone from storage; it ends failed and the hit is trimmed to what arrived.
    "failed_kv_batch": "the last KV batch ends failed and the expected hit is trimmed",
    # KV complete in the snapshot; the extra pools' transfer ends in the gap.
    "extra_pools": "the extra pools' transfer ends",
}


@pytest.mark.needs("hold_points")
@pytest.mark.io_order("kv_then_extras", "holds the last KV batch, or the extra pools' transfer after every KV batch")
@pytest.mark.clause("F2", "D2", "D3", "D4", "D5")
@pytest.mark.parametrize("policy", ["wait_complete", "timeout"])
@pytest.mark.parametrize("moved", [pytest.param("last_kv_batch", marks=pytest.mark.needs("no_extra_pools")),
                                   pytest.param("failed_kv_batch", marks=pytest.mark.needs("no_extra_pools")),
                                   pytest.param("extra_pools", marks=pytest.mark.needs("extra_pools"))])
def test_a_vote_is_the_vote_of_the_snapshot_it_recorded(impl, make_cache, trace, gate, clock, tmp_path, profile, policy, moved, page_size):
    """The scheduler is held between the vote's snapshot and the vote while `moved` happens; the vote must not see it."""
    config = TerminationConfig(policy=policy, page_size=page_size)
    env = {} if moved == "extra_pools" else {"extra_pools": ()}
    cache = make_cache(termination=config, batch_pages=BATCH, **env)
    tokens, data = stored_request(cache, seed=81, pages=PAGES, page_size=page_size)
    if moved == "failed_kv_batch":
        first = gate.hold("first KV batch", lambda e: e.kind is EventKind.IO_START and e.op == "r1" and e.pool == "kv")
    held = gate.hold(MOVES[moved], started(moved != "extra_pools", PAGES // BATCH if moved != "extra_pools" else 1, trace))
    assert cache.prefetch("r1", tokens) == len(tokens)
    if moved == "failed_kv_batch":
        first.wait_reached()
        files = key_files(tmp_path / "storage", page_write_keys(trace, "kv")[PAGES - BATCH:PAGES])
        if not files:
            first.release()
            held.release()
            pytest.skip(f"{impl.name}'s storage names no file by the page key its page_write records")
        remove_files(files)
        first.release()
    held.wait_reached()
    scheduler = threading.get_ident()
    trace.at_release(lambda r: r.op == "r1" and r.thread == scheduler and not r.with_terminate, moving(trace, held))
    cache.check_progress(["r1"])
    if not trace.releases("r1", scheduler):
        held.release()
        pytest.skip(f"{impl.name}: {NO_HOLD_POINT}")
    votes = [e for e in trace.events() if e.kind is EventKind.VOTE and e.op == "r1"]
    assert votes and votes[0].state is not None, f"test setup: the check recorded no vote of r1 with its state ({[e.describe() for e in votes]})"
    vote = votes[0]
    seen = vote.seen if vote.seen is not None else trace.releases("r1", scheduler)[0].position
    between = moved_between(trace.events(), "r1", seen, vote.seq)
    assert between, f"test setup: no IO of r1 ended between its vote's snapshot (trace position {seen}) and the vote (#{vote.seq})"
    want = profile.vote(vote.state)
    if bool(vote.value) != want and own_decision(cache, vote.state, config, clock.now()) == bool(vote.value):
        raise AssertionError(
            f"{profile.vote_clause(vote.state)}: r1's vote at step {vote.step} is {bool(vote.value)}, which is {impl.name}'s own decision "
            f"of the snapshot it recorded ({vote.state.hit_pages} hit pages, {vote.state.completed_tokens} tokens completed, "
            f"{pools(vote.state)}): the vote read its snapshot, and the decision is wrong, where the spec votes {want}")
    assert bool(vote.value) == want, (
        f"F2: r1's vote at step {vote.step} is {bool(vote.value)}, but the snapshot it recorded ({vote.state.hit_pages} hit pages, "
        f"{vote.state.completed_tokens} tokens completed, {pools(vote.state)}) "
        f"votes {want}: the vote read progress again after its snapshot, while {MOVES[moved]} in between ({describe(between)}); "
        f"beside it, {profile.vote_clause(vote.state)}: voted {bool(vote.value)} where the spec votes {want}")
    committed = drive(cache, ["r1"], trace=trace)["r1"]
    served(cache, tokens, data, committed)
    close_and_check_trace(cache, trace, config)


# --- the commit ----------------------------------------------------------------------------

@pytest.mark.needs("hold_points")
@pytest.mark.io_order("kv_then_extras", "holds the last KV batch with nothing else in flight")
@pytest.mark.clause("F2", "F3", "F11")
@pytest.mark.parametrize("policy", ["best_effort", "timeout"])
def test_the_commit_snapshot_is_read_with_the_terminate_mark(impl, make_cache, trace, gate, clock, profile, policy, page_size):
    """After a yes vote, any snapshot the scheduler lets go of before the terminate mark is held while every IO of r1 ends.

    A commit whose snapshot is read with the mark (one lock acquisition) has
    no such snapshot, and commits what had ended at the mark. One whose
    snapshot is taken apart, before the mark, commits less than had ended
    at its own terminate.
    """
    config = TerminationConfig(policy=policy, page_size=page_size)
    cache = make_cache(termination=config, batch_pages=BATCH)
    tokens, data = stored_request(cache, seed=82, pages=PAGES, page_size=page_size)
    held = gate.hold("the last KV batch", started(True, PAGES // BATCH, trace))
    assert cache.prefetch("r1", tokens) == len(tokens)
    held.wait_reached()
    if policy == "timeout":
        pass_deadline(cache, clock, config, PAGES, ["r1"], profile)
    scheduler = threading.get_ident()

    def after_a_yes_vote(r: SnapshotRelease) -> bool:
        yes = any(e.kind is EventKind.VOTE and e.op == "r1" and e.value and e.seq < r.position for e in trace.events())
        return r.op == "r1" and r.thread == scheduler and not r.with_terminate and yes

    trace.at_release(after_a_yes_vote, moving(trace, held))
    done = cache.check_progress(["r1"])
    if not trace.releases("r1", scheduler):
        held.release()
        pytest.skip(f"{impl.name}: {NO_HOLD_POINT}")
    assert "r1" in done, f"{'L2' if policy == 'timeout' else profile.counterpart('D1')}: the check did not terminate r1"
    allowed = fence_tokens(trace.events(), "r1", cache.pools, page_size)
    terminate = next(e for e in trace.events() if e.kind is EventKind.TERMINATE and e.op == "r1")
    if done["r1"] != allowed:
        apart = [r for r in trace.releases("r1", scheduler) if after_a_yes_vote(r)]
        between = moved_between(trace.events(), "r1", apart[0].position, terminate.seq) if apart else []
        consequence = "F11: loaded pages dropped" if done["r1"] < allowed else "F3: pages past what had loaded committed"
        raise AssertionError(
            f"F2: r1 committed {done['r1']} tokens; what had ended at its terminate mark (#{terminate.seq}) allows {allowed}: "
            f"the progress it used was not read with the mark" + (f" (a snapshot taken before it; IO ended in between: {describe(between)})" if between else "")
            + f"; beside it, {consequence}")
    held.release()
    trace.wait_for_event(EventKind.IO_DONE, "r1", WAIT_S)
    cache.check_progress([])  # the step at which slots of ended operations may be freed
    served(cache, tokens, data, done["r1"])
    close_and_check_trace(cache, trace, config)
