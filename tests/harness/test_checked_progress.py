"""A scheduler check that raises: the rule the trace shows broken is named first; after a background thread failed, else L5."""

from __future__ import annotations

import pytest

from conformance.scenarios.workload import checked_progress
from spec import ManualClock, TraceRecorder
from spec.trace import HOST, LOAD, EventKind


class CrashedCache:
    """A cache whose IO thread died: every check raises what the thread left behind."""

    def __init__(self, failures: list[str]) -> None:
        self.failures = failures

    def check_progress(self, request_ids):
        raise RuntimeError("the IO thread is gone")

    def background_errors(self) -> list[str]:
        return self.failures


def recorder(*, load_slots: int) -> TraceRecorder:
    rec = TraceRecorder(ManualClock())
    rec.record(EventKind.OP_START, op="r1", value={"policy": "wait_complete", "page_size": 4, "requested_pages": 2})
    rec.record(EventKind.IO_START, op="r1", pool="kv", space=HOST, slots=list(range(load_slots)), io=1, value=LOAD, keys=("a", "b"))
    return rec


def test_a_rule_the_trace_shows_broken_is_named_before_the_background_failure():
    with pytest.raises(AssertionError, match=r"^S5: r1: a load of 2 page key\(s\) of pool kv into 4 slots .*RuntimeError.*IO thread: keys and targets differ"):
        checked_progress(CrashedCache(["IO thread: keys and targets differ"]), ["r1"], recorder(load_slots=4))


def test_a_clean_trace_leaves_the_background_failure_as_l5():
    with pytest.raises(AssertionError, match=r"^L5: a check of \['r1'\] raised RuntimeError"):
        checked_progress(CrashedCache(["IO thread: boom"]), ["r1"], recorder(load_slots=8))


def test_without_a_background_failure_a_clean_trace_leaves_the_implementation_s_exception():
    with pytest.raises(RuntimeError, match="the IO thread is gone"):
        checked_progress(CrashedCache([]), ["r1"], recorder(load_slots=8))


def test_a_check_that_raises_on_its_own_names_the_rule_the_trace_shows_broken():
    # A commit the implementation's own tree refused: what it handed the tree is in the trace.
    rec = recorder(load_slots=8)
    rec.record(EventKind.COMMIT, op="r1", step=1, value=8, pool="kv", slots=list(range(8)), keys=("a",))
    with pytest.raises(AssertionError, match=r"^S5: r1: a commit hands the tree 8 slots of pool kv with 1 page key\(s\) .*RuntimeError: the IO thread is gone"):
        checked_progress(CrashedCache([]), ["r1"], rec)
