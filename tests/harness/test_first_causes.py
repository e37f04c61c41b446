"""Trace violations said as their cause's clause first (conformance/oracles/first_causes.py), and F9's copy check."""

from __future__ import annotations

from conformance.oracles.first_causes import said_with_causes
from conformance.scenarios.copy_frees import frees_under_pending_copies
from spec.trace import HOST, LOAD, LOAD_BACK_COPY, DEVICE, Event, EventKind, Trace
from spec.trace_checks import Violation


def event(seq: int, kind: EventKind, **fields) -> Event:
    return Event(seq=seq, kind=kind, rank=0, t=0.0, **fields)


LOAD_START = event(1, EventKind.IO_START, op="r1", pool="indexer", space=HOST, slots=(0, 1), io=3, value=LOAD)
COPY_START = event(2, EventKind.IO_START, pool="kv", space=DEVICE, slots=(8, 9), io=4, value=LOAD_BACK_COPY)
INSERT = event(3, EventKind.INSERT, op="r1", pool="indexer", space=HOST, slots=(0, 1))
OWN_FREE = event(4, EventKind.FREE, op="r1", pool="indexer", space=HOST, slots=(0, 1))
TREE_FREE = event(5, EventKind.FREE, pool="kv", space=DEVICE, slots=(8, 9))
TRACE = Trace(rank=0, events=(LOAD_START, COPY_START, INSERT, OWN_FREE, TREE_FREE))


def test_an_insert_under_its_own_load_leads_with_the_commit_clamp():
    line, = said_with_causes([Violation("S1", "inserted while IO 3 into it is in flight", INSERT, 0)], TRACE)
    assert line.startswith("F3: r1 committed a page of pool indexer whose own load IO 3") and "; beside it, S1: inserted while IO 3" in line


def test_a_free_under_its_own_load_leads_with_f5_and_under_a_copy_with_f9():
    own, copy = said_with_causes([Violation("S3", "freed while IO 3 into or out of it is in flight", OWN_FREE, 0),
                                  Violation("S3", "freed while IO 4 into or out of it is in flight", TREE_FREE, 8)], TRACE)
    assert own.startswith("F5: r1 freed a slot while its own load IO 3") and "beside it, S3: " in own
    assert copy.startswith("F9: a device slot of pool kv was freed while the load-back copy IO 4") and "beside it, S3: " in copy


def test_a_violation_without_a_cause_in_the_trace_is_said_as_it_is():
    other = Violation("S3", "freed as the tree but held by operation r1", OWN_FREE, 0)
    assert said_with_causes([other], TRACE) == [str(other)]


def test_frees_under_pending_copies_name_the_copy_and_stop_once_it_ended():
    found = list(frees_under_pending_copies(TRACE.events))
    assert found == [f"device slot {s} of pool kv freed at #5 while load-back copy IO 4 through it was pending" for s in (8, 9)]
    ended = event(5, EventKind.IO_END, pool="kv", space=DEVICE, slots=(8, 9), io=4, value=True)
    assert not list(frees_under_pending_copies([COPY_START, ended, event(6, EventKind.FREE, pool="kv", space=DEVICE, slots=(8, 9))]))


def test_a_leaked_slot_whose_load_ended_after_the_terminate_leads_with_f5():
    alloc = event(0, EventKind.ALLOC, op="r1", pool="kv", space=HOST, slots=(4, 5))
    start = event(1, EventKind.IO_START, op="r1", pool="kv", space=HOST, slots=(4, 5), io=2, value=LOAD)
    terminate = event(2, EventKind.TERMINATE, op="r1", step=1)
    ended = event(3, EventKind.IO_END, op="r1", pool="kv", space=HOST, slots=(4, 5), io=2, value=True)
    leak = Violation("S3", "never inserted nor freed by r1 (leaked)", alloc, 4)
    line, = said_with_causes([leak], Trace(rank=0, events=(alloc, start, terminate, ended)))
    assert line.startswith("F5: slot 4 of pool kv was under r1's IO 2 at its terminate (#2)") and "beside it, S3: never inserted" in line
    # Ended before the terminate: the commit or the release owned it, and F5 is not the cause.
    assert said_with_causes([leak], Trace(rank=0, events=(alloc, start, ended, terminate))) == [str(leak)]


def test_a_rule_broken_before_a_thread_died_is_named_with_the_death():
    """checked_progress says which rule the trace showed broken before the death: the matrix names it, then L5."""
    import json
    from types import SimpleNamespace

    from conformance.report.failures import PROP_FAILED, failure_properties

    before = SimpleNamespace(value=AssertionError("S5: r1: a load of 2 page key(s) of pool kv into 4 slots at #7 io_start rank 0 "
                                                  "(then a check of ['r1'] raised RuntimeError: the implementation's background threads failed: x)"))
    named = json.loads(dict(failure_properties(before, death="L5: x"))[PROP_FAILED])
    assert list(named) == ["S5", "L5"]
    after = SimpleNamespace(value=AssertionError("F8: slots still allocated after evict_all (leaked)"))
    assert json.loads(dict(failure_properties(after, death="L5: x"))[PROP_FAILED]) == {"L5": "L5: x"}
