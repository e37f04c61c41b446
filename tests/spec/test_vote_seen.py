"""L1 judges a vote by the snapshot it was computed from (`seen` on the VOTE event).

A scheduler snapshots progress under the operation's lock, then records its
vote after releasing it; IO that ends in between lands in the trace before
the VOTE. With `seen` (the trace position of the snapshot) the checker knows
the vote never saw that IO_DONE; without it, the old reading still holds.
"""

from spec import DecisionState, EventKind as K, ManualClock, Policy, TerminationConfig, TraceRecorder, check
from spec.trace import HOST, LOAD

PAGE = 2
CFG = TerminationConfig(policy="wait_complete", page_size=PAGE)


def trace_with_io_done_between_snapshot_and_vote(*, record_seen: bool, vote_after_done: bool = False):
    rec = TraceRecorder(ManualClock())
    rec.record(K.OP_START, op="r1", value={"policy": "wait_complete", "start": 0.0, "page_size": PAGE, "requested_pages": 2})
    rec.record(K.ALLOC, op="r1", pool="kv", space=HOST, slots=(0, 1, 2, 3))
    rec.record(K.HIT, op="r1", value=2)
    io = rec.next_io_id()
    rec.record(K.IO_START, op="r1", pool="kv", space=HOST, slots=(0, 1, 2, 3), io=io, value=LOAD)
    rec.record(K.STEP, step=1)
    snapshot_at = rec.position()  # the scheduler's snapshot: KV not ended yet
    rec.record(K.IO_END, op="r1", pool="kv", space=HOST, slots=(0, 1, 2, 3), io=io, value=True)
    rec.record(K.IO_DONE, op="r1")
    seen = rec.position() if vote_after_done else snapshot_at
    state = DecisionState(Policy.WAIT_COMPLETE, PAGE, 2, 0 if not vote_after_done else 4, False, False, True, False)
    fields = {"seen": seen} if record_seen else {}
    rec.record(K.VOTE, op="r1", step=1, value=vote_after_done, state=state, **fields)
    return rec.trace()


def test_a_vote_that_did_not_see_the_io_done_is_no_l1_violation():
    assert check(trace_with_io_done_between_snapshot_and_vote(record_seen=True), CFG, clauses=["L1"], closed=False) == []


def test_without_seen_the_vote_is_judged_at_its_own_position():
    violations = check(trace_with_io_done_between_snapshot_and_vote(record_seen=False), CFG, clauses=["L1"], closed=False)
    assert [v.clause for v in violations] == ["L1"]


def test_position_is_the_seq_of_the_next_event():
    rec = TraceRecorder(ManualClock())
    assert rec.position() == 0
    event = rec.record(K.STEP, step=1)
    assert event.seq == 0 and rec.position() == 1
