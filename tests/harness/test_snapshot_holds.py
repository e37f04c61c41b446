"""The snapshot hold point (conformance/scenarios/snapshot_holds.py): an action runs where a snapshot's lock is let go, on that thread, unlocked."""

from __future__ import annotations

import threading

from conformance.scenarios.snapshot_holds import SnapshotHoldTrace, moved_between
from spec.clock import ManualClock
from spec.trace import EventKind


def test_an_armed_action_runs_once_after_the_snapshot_lock_is_released():
    trace = SnapshotHoldTrace(ManualClock(0.0))
    lock = trace.fence_lock()
    seen = []
    trace.at_release(lambda r: r.op == "r1" and not r.with_terminate,
                     lambda r: seen.append((r.sections, lock.locked(), threading.get_ident())))
    with lock:
        trace.check_fenced("end_io", lock, "r1")  # no snapshot: nothing runs
    with lock:
        trace.check_fenced("terminate", lock, "r1")
        trace.check_fenced("snapshot", lock, "r1")  # with the mark: not what the predicate waits for
    with lock:
        trace.check_fenced("snapshot", lock, "r1")
    with lock:
        trace.check_fenced("snapshot", lock, "r1")  # the action ran once already
    assert seen == [(frozenset({"snapshot"}), False, threading.get_ident())]
    assert [r.with_terminate for r in trace.releases("r1")] == [True, False, False]
    assert not trace.unfenced()


def test_moved_between_lists_what_the_op_did_in_the_gap():
    trace = SnapshotHoldTrace(ManualClock(0.0))
    first = trace.position()
    trace.record(EventKind.IO_END, op="r1", pool="kv", space="host", slots=[0], io=1, value=True)
    trace.record(EventKind.IO_END, op="r2", pool="kv", space="host", slots=[4], io=2, value=True)
    trace.record(EventKind.HIT, op="r1", value=1)
    assert [e.kind for e in moved_between(trace.events(), "r1", first, trace.position())] == [EventKind.IO_END, EventKind.HIT]
    assert moved_between(trace.events(), "r1", first, first) == []
