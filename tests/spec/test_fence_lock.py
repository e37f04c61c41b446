"""The fence's lock discipline: a section entered without its operation's lock is reported under the clause that lock keeps."""

from __future__ import annotations

import threading

import pytest

from spec.clock import ManualClock
from spec.errors import ConfigError
from spec.fence_lock import FENCED_SECTIONS, FenceLock
from spec.invariants import check
from spec.trace import NullRecorder, TraceRecorder


def test_a_fence_lock_knows_which_thread_holds_it():
    lock = FenceLock()
    assert not lock.held_by_current_thread() and not lock.locked()
    seen_elsewhere = []
    with lock:
        assert lock.held_by_current_thread() and lock.locked()
        other = threading.Thread(target=lambda: seen_elsewhere.append(lock.held_by_current_thread()))
        other.start()
        other.join(5)
    assert seen_elsewhere == [False]
    assert not lock.held_by_current_thread()
    assert lock.acquire(blocking=False) and not FenceLock().locked()
    lock.release()


def test_sections_run_under_their_lock_leave_nothing_to_report():
    trace = TraceRecorder(ManualClock(0.0))
    lock = trace.fence_lock()
    with lock:
        for section in FENCED_SECTIONS:
            trace.check_fenced(section, lock, "r1")
    assert trace.unfenced() == () and check(trace.trace(), clauses=["fence_lock"]) == []


@pytest.mark.parametrize("section", sorted(FENCED_SECTIONS))
def test_a_section_run_without_its_lock_names_the_clause_that_lock_keeps(section):
    trace = TraceRecorder(ManualClock(0.0))
    held_elsewhere = trace.fence_lock()
    mine = trace.fence_lock()
    with held_elsewhere:  # another operation's lock is not this one's
        trace.check_fenced(section, mine, "r1")
    trace.check_fenced(section, threading.Lock(), "r1")  # a lock that cannot say who holds it is not a fence lock
    violations = check(trace.trace(), clauses=["fence_lock"])
    assert [v.clause for v in violations] == [FENCED_SECTIONS[section][0]] * 2
    assert str(violations[0]).startswith(f"{FENCED_SECTIONS[section][0]}: rank 0: r1: {section} ran without the operation's lock on thread MainThread")


def test_an_unknown_section_is_one_line_naming_the_accepted_ones():
    with pytest.raises(ConfigError, match=r"invalid section: 'snapshott' \(accepted: snapshot, terminate, .*drain\)"):
        TraceRecorder(ManualClock(0.0)).check_fenced("snapshott", FenceLock())


def test_production_recorders_hand_out_plain_locks_and_check_nothing():
    recorder = NullRecorder()
    lock = recorder.fence_lock()
    assert not isinstance(lock, FenceLock)
    recorder.check_fenced("begin_io", lock)
    assert recorder.unfenced() == ()
