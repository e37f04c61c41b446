"""The VOTE record and the snapshot it was computed from agree, for the trace checker.

Each cache takes one locked progress snapshot, decides, and records its VOTE
after releasing the operation's lock. IO ending in that gap puts IO_DONE
before the VOTE in the trace although the vote never saw it; the VOTE carries
the trace position of its snapshot (`seen`), so `spec.invariants.check` judges
the vote by what it saw and reports no false L1. The gap is made
deterministic by wrapping the real operation's `progress()`: the held IO is
released and awaited right after the snapshot is taken.
"""

from __future__ import annotations

import pytest

from conformance.bounds import WAIT_S
from conformance.gates import Gate
from spec import check
from spec.clock import ManualClock
from spec.trace import LOAD, EventKind, TraceRecorder

NAMES = ("hiradix", "unified_radix", "hi_mamba_radix")


@pytest.mark.parametrize("name", NAMES)
def test_io_ending_between_snapshot_and_vote_record_is_no_false_l1(cache_factory, oracle, name):
    clock = ManualClock(1000.0)
    trace = TraceRecorder(clock)
    gate = Gate(trace, timeout_s=WAIT_S)
    cache = cache_factory.build(name, trace=trace, clock=clock)
    tokens, _ = oracle.in_storage_only(cache, 31, 4)
    kv_loads = []

    def second_kv_batch(e) -> bool:
        if e.kind is EventKind.IO_START and e.pool == "kv" and e.value == LOAD and e.op == "r1":
            kv_loads.append(e)
            return len(kv_loads) == 2
        return False

    hold = gate.hold("second kv batch of r1", second_kv_batch)
    assert cache.prefetch_from_storage("r1", tokens) == len(tokens)
    hold.wait_reached()
    op = cache.ongoing_prefetch["r1"]
    snapshot_of = op.progress

    def snapshot_then_io_ends():
        progress = snapshot_of()
        op.progress = snapshot_of  # once
        hold.release()
        assert op.io_done.wait(WAIT_S), "the released IO did not end"
        return progress

    op.progress = snapshot_then_io_ends
    assert cache.check_prefetch_progress(["r1"]) == {}, "the vote saw incomplete IO: it must be no"
    votes = [e for e in trace.events() if e.kind is EventKind.VOTE and e.op == "r1"]
    done = next(e for e in trace.events() if e.kind is EventKind.IO_DONE and e.op == "r1")
    assert done.seq < votes[0].seq, "the scenario did not put IO_DONE before the VOTE record"
    assert cache.check_prefetch_progress(["r1"]) == {"r1": len(tokens)}
    cache.check_prefetch_progress([])
    gate.close()
    assert check(trace.trace(), cache.termination, closed=False) == []


@pytest.mark.parametrize("name", NAMES)
def test_a_vote_over_progress_past_the_hit_is_recorded_without_a_state(cache_factory, oracle, name):
    """More tokens than the hit (a counting bug) is outside the decision's domain: the VOTE keeps its vote, not a state, and the check goes on."""
    trace = TraceRecorder(ManualClock(1000.0))
    cache = cache_factory.build(name, trace=trace)
    tokens, _ = oracle.in_storage_only(cache, 32, 4)
    assert cache.prefetch_from_storage("r1", tokens) == len(tokens)
    cache.wait_prefetch_io("r1")
    op = cache.ongoing_prefetch["r1"]
    with op.lock:
        op.completed_tokens += cache.page_size  # one page counted twice
    cache.check_prefetch_progress(["r1"])
    votes = [e for e in trace.events() if e.kind is EventKind.VOTE and e.op == "r1"]
    assert votes and votes[0].state is None
    assert not check(trace.trace(), None, clauses=["D"]), "no decision clause judges a vote it has no state for"
