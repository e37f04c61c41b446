"""A planted fault that never fires is said, so that a scenario built on it judges nothing (conformance/gates.py)."""

from __future__ import annotations

import pytest

from conformance.gates import Faults, InjectedFault, IoValve, WatchedTrace
from spec.clock import ManualClock
from spec.trace import LOAD, EventKind


def test_a_rule_no_event_matched_is_unfired_and_one_that_fired_is_not():
    faults = Faults("rank 1: ")
    faults.add("second KV batch", lambda e: e.io == 2)
    faults.add("any backup", lambda e: e.value == "backup", times=3)
    trace = WatchedTrace(ManualClock())
    first = trace.record(EventKind.IO_START, op="r1", pool="kv", value=LOAD, io=1)
    faults.raise_if_matches(first)
    assert faults.unfired() == ["second KV batch", "any backup"]
    second = trace.record(EventKind.IO_START, op="r1", pool="kv", value=LOAD, io=2)
    with pytest.raises(InjectedFault, match="second KV batch"):
        faults.raise_if_matches(second)
    assert faults.unfired() == ["any backup"]


def test_a_rank_valve_says_which_of_its_faults_never_fired():
    trace = WatchedTrace(ManualClock(), rank=1)
    valve = IoValve(trace, rank=1, timeout_s=1.0)
    valve.fail("first KV batch of r1", lambda e: e.kind is EventKind.IO_START and e.op == "r1")
    assert valve.unfired() == ["first KV batch of r1"]
    event = trace.record(EventKind.IO_START, op="r1", pool="kv", value=LOAD, io=1)
    with pytest.raises(InjectedFault):
        trace.gate(event)  # where an implementation's IO thread reaches its gate point
    assert valve.unfired() == []
