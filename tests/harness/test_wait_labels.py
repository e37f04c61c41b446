"""Bounded waits that run out name the clause whose rule broke (conformance/report/failures.py reads the label).

A prefetch that never finishes is L4 while one of its transfers never ended
and L1 once all its IO had; a multi-rank hang is L3 only where the ranks
really entered different collectives, not where the scenario itself holds a
rank; pool files are found by the keys the trace says were written.
"""

from __future__ import annotations

import pytest

from conformance.gates import WatchedTrace
from conformance.report.failures import named_clauses
from conformance.gates import GateTimeout
from conformance.multirank.launch import first_divergence
from conformance.scenarios.races import pool_files
from conformance.scenarios.workload import drive
from spec.clock import ManualClock
from spec.trace import HOST, LOAD, EventKind, TraceRecorder


class NeverFinishes:
    """A cache whose scheduler check never finishes anything."""

    def __init__(self) -> None:
        self.checks = 0

    def check_progress(self, ids):
        self.checks += 1
        return {}


def started(trace: TraceRecorder, op: str) -> int:
    io = trace.next_io_id()
    trace.record(EventKind.OP_START, op=op, value={"policy": "wait_complete", "requested_pages": 1})
    trace.record(EventKind.IO_START, op=op, pool="mamba", space=HOST, slots=[3], io=io, value=LOAD)
    return io


def failure(trace: TraceRecorder | None) -> str:
    cache = NeverFinishes()
    with pytest.raises(AssertionError) as info:
        drive(cache, ["r1"], max_steps=3, trace=trace)
    assert cache.checks == 3
    return str(info.value)


def test_a_transfer_that_never_ended_is_l4_naming_it():
    trace = TraceRecorder(ManualClock(0.0))
    io = started(trace, "r1")
    message = failure(trace)
    assert list(named_clauses(message)) == ["L4"] and f"IO {io} (mamba storage_to_host" in message, message


def test_io_never_done_is_l4():
    trace = TraceRecorder(ManualClock(0.0))
    io = started(trace, "r1")
    trace.record(EventKind.IO_END, op="r1", pool="mamba", space=HOST, slots=[3], io=io, value=True)
    message = failure(trace)
    assert list(named_clauses(message)) == ["L4"] and "no io_done" in message, message


def test_all_io_ended_yet_never_terminated_is_l1():
    trace = TraceRecorder(ManualClock(0.0))
    io = started(trace, "r1")
    trace.record(EventKind.IO_END, op="r1", pool="mamba", space=HOST, slots=[3], io=io, value=False)
    trace.record(EventKind.IO_DONE, op="r1")
    message = failure(trace)
    assert list(named_clauses(message)) == ["L1"] and "3 checks did not terminate it" in message, message


def test_without_the_trace_the_wait_still_fails_but_names_nothing():
    assert named_clauses(failure(None)) == {}


def test_waiting_for_io_done_names_l4():
    trace = WatchedTrace(ManualClock(0.0))
    with pytest.raises(GateTimeout) as info:
        trace.wait_for_event(EventKind.IO_DONE, "r1", 0.01)
    assert list(named_clauses(str(info.value))) == ["L4"]
    with pytest.raises(GateTimeout) as info:
        trace.wait_for_event(EventKind.COMMIT, "r1", 0.01)
    assert named_clauses(str(info.value)) == {}


def test_ranks_in_different_collectives_diverge_under_l3():
    per_rank = {0: ["vote_max(op r1, step 1)", "drain_queues_min(step 1)"], 1: ["vote_max(op r1, step 1)", "abort_barrier(op r1)"]}
    line = first_divergence(per_rank)
    assert line is not None and list(named_clauses(line)) == ["L3"] and "collective #2" in line


def test_a_rank_the_scenario_holds_is_behind_not_divergent():
    per_rank = {0: ["vote_max(op r1, step 1)", "drain_queues_min(step 1)"], 1: ["vote_max(op r1, step 1)"]}
    assert first_divergence(per_rank) is not None, "a rank that simply never entered the collective: L3"
    assert first_divergence(per_rank, behind={1}) is None, "held by its scenario: not a divergence"
    per_rank[1].append("abort_barrier(op r1)")
    assert first_divergence(per_rank, behind={1}) is not None, "what a held rank did enter still counts"


def test_pool_files_are_found_by_upstream_names_through_the_traces_page_keys(tmp_path):
    trace = TraceRecorder(ManualClock(0.0))
    (tmp_path / "h1__0_1.bin").write_bytes(b"kv")
    (tmp_path / "h1.mamba__0_1.bin").write_bytes(b"state")
    (tmp_path / "h2.mamba").write_bytes(b"ours")
    assert pool_files(tmp_path, "mamba") == {tmp_path / "h2.mamba"}
    trace.record(EventKind.PAGE_WRITE, pool="mamba", keys=["h1.mamba__0_1.bin"], digests=["d"])
    trace.record(EventKind.PAGE_WRITE, pool="kv", keys=["h1__0_1.bin"], digests=["d"])
    assert pool_files(tmp_path, "mamba", trace) == {tmp_path / "h2.mamba", tmp_path / "h1.mamba__0_1.bin"}


def test_collectives_on_several_groups_are_compared_within_each_group():
    def on(name, group):
        return f"{name}(op r1, step 1) on {group}"

    # Four ranks as 2x2: each rank's sequence interleaves its two groups; only members are compared.
    per_rank = {r: [on("vote_max", f"attn_cp:{r % 2},{r % 2 + 2}"), on("vote_max", f"attn_tp:{r - r % 2},{r - r % 2 + 1}")] for r in range(4)}
    assert first_divergence(per_rank) is None, "different groups on different ranks are no divergence"
    per_rank[3].append(on("vote_max", "attn_tp:2,3"))  # a rank-local extra trip on one group
    line = first_divergence(per_rank)
    assert line == "L3: collective #2 on group attn_tp:2,3 differs across ranks: rank 2 nothing, rank 3 " + on("vote_max", "attn_tp:2,3")
