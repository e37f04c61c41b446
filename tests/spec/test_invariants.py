"""Each invariant: a hand-built trace that holds, and one that violates it and is caught."""

import pytest

from spec import DecisionState, EventKind as K, ManualClock, Policy, TerminationConfig, TraceRecorder, check
from spec.decision import VOTE_COLLECTIVE
from spec.fence import COMMIT_COLLECTIVE, HIT_COLLECTIVE
from spec.trace import HOST, LOAD, LOAD_BACK_COPY, DEVICE, page_digest

PAGE = 2
CFG = TerminationConfig(policy="wait_complete", page_size=PAGE, timeout_base_s=1.0, timeout_per_ki_token_s=0.0, timeout_max_s=1.0)
KV = (0, 1, 2, 3)


class Run:
    """Writes one rank's trace of one two-page prefetch with an indexer pool."""

    def __init__(self, rank=0, clock=None, policy="wait_complete", op="r1"):
        self.clock = clock or ManualClock()
        self.rec = TraceRecorder(self.clock, rank=rank)
        self.op = op
        self.policy = Policy.parse(policy)
        self.step = 0

    def r(self, kind, **kw):
        kw.setdefault("op", self.op)
        return self.rec.record(kind, **kw)

    def start(self, pages=2, io_timeout_s=None):
        value = {"policy": self.policy.value, "start": self.clock.now(), "page_size": PAGE, "requested_pages": pages}
        if io_timeout_s is not None:
            value["io_timeout_s"] = io_timeout_s
        self.r(K.OP_START, value=value)
        self.r(K.ALLOC, pool="kv", space=HOST, slots=KV)
        self.r(K.ALLOC, pool="indexer", space=HOST, slots=KV)
        self.r(K.COLLECTIVE, value=HIT_COLLECTIVE)
        self.r(K.HIT, value=pages)
        return self

    def io(self, pool, slots, ok=True, end=True):
        io = self.rec.next_io_id()
        self.r(K.IO_START, pool=pool, space=HOST, slots=slots, io=io, value=LOAD)
        if end:
            self.r(K.IO_END, pool=pool, space=HOST, slots=slots, io=io, value=ok)
        return io

    def end_io(self, io, pool, slots, ok=True):
        self.r(K.IO_END, pool=pool, space=HOST, slots=slots, io=io, value=ok)

    def load_all(self):
        self.io("kv", KV)
        self.io("indexer", KV)
        self.r(K.IO_DONE)
        return self

    def state(self, completed=4, pools_done=True, timed_out=False, terminated=False, hit=2):
        return DecisionState(self.policy, PAGE, hit, completed, timed_out, True, pools_done, terminated)

    def check_step(self, vote, state, terminate, tokens=4, collectives=True):
        self.step += 1
        s = self.step
        self.r(K.STEP, op=None, step=s)
        self.r(K.VOTE, step=s, value=vote, state=state)
        if collectives and self.policy.uses_collective:
            self.r(K.COLLECTIVE, step=s, value=VOTE_COLLECTIVE)
        if terminate:
            self.r(K.TERMINATE, step=s, value=state.completed_tokens)
            self.r(K.COLLECTIVE, step=s, value=COMMIT_COLLECTIVE)
            self.r(K.COMMIT, step=s, value=tokens)
        return self

    def insert(self, pools=("kv", "indexer"), slots=KV):
        for pool in pools:
            self.r(K.INSERT, pool=pool, space=HOST, slots=slots)
        return self

    def trace(self):
        return self.rec.trace()


def good_run(**kw):
    run = Run(**kw).start().load_all()
    run.check_step(True, run.state(), terminate=True).insert()
    return run


def clauses_of(violations):
    return {v.clause for v in violations}


def test_a_conforming_trace_has_no_violations():
    assert check(good_run().trace(), CFG) == []


def test_two_conforming_ranks_have_no_violations():
    assert check([good_run(rank=0).trace(), good_run(rank=1).trace()], CFG) == []


def test_s1_insert_while_pool_io_in_flight():
    run = Run().start()
    run.io("kv", KV)
    io = run.io("indexer", KV, end=False)  # the extra get is still writing
    run.check_step(True, run.state(pools_done=True), terminate=True).insert()
    run.end_io(io, "indexer", KV)
    violations = check(run.trace(), CFG, clauses=["S1"])
    assert clauses_of(violations) == {"S1"}
    assert any("in flight" in v.message and v.slot == 0 and v.event.pool == "indexer" for v in violations)


def test_s1_insert_before_terminate_or_done():
    run = Run().start()
    run.io("kv", KV)
    run.io("indexer", KV)  # every transfer ended, but the IO thread may still start more
    run.insert()
    violations = check(run.trace(), CFG, clauses=["S1"])
    assert violations and "before operation r1 was terminated or done" in violations[0].message


def test_s1_insert_after_io_done_without_terminate_holds():
    # A cache that commits a finished prefetch on its IO thread's last word (0.5.2x's ACK drain).
    run = Run().start().load_all()
    run.insert()
    assert check(run.trace(), CFG, clauses=["S1"]) == []


def test_s1_load_back_under_io():
    run = good_run()
    io = run.rec.next_io_id()
    run.r(K.IO_START, op=None, pool="kv", space=HOST, slots=(0, 1), io=io, value=LOAD)
    copy = run.rec.next_io_id()
    run.r(K.IO_START, op=None, pool="kv", space=HOST, slots=(0, 1), io=copy, value=LOAD_BACK_COPY)
    violations = check(run.trace(), CFG, clauses=["S1"])
    assert [v.slot for v in violations] == [0, 1] and all("loaded back while IO" in v.message for v in violations)


def test_s1_load_back_of_a_quiet_slot_holds():
    run = good_run()
    copy = run.rec.next_io_id()
    run.r(K.IO_START, op=None, pool="kv", space=HOST, slots=(0, 1), io=copy, value=LOAD_BACK_COPY)
    run.r(K.IO_END, op=None, pool="kv", space=HOST, slots=(0, 1), io=copy, value=True)
    assert check(run.trace(), CFG, clauses=["S1"]) == []


def test_s2_io_after_terminate():
    run = Run().start()
    run.io("kv", KV)
    run.check_step(True, run.state(), terminate=True, tokens=0)
    run.io("indexer", KV)  # the extra get starts after terminate (window 2)
    run.r(K.FREE, pool="indexer", space=HOST, slots=KV)
    run.r(K.FREE, pool="kv", space=HOST, slots=KV)
    violations = check(run.trace(), CFG, clauses=["S2"])
    assert clauses_of(violations) == {"S2"} and violations[0].event.kind is K.IO_START


def commit_handing(slots, keys):
    rec = TraceRecorder(ManualClock())
    rec.record(K.OP_START, op="r1", value={"policy": "wait_complete", "page_size": 2, "requested_pages": 2})
    rec.record(K.COMMIT, op="r1", step=1, value=len(slots), pool="kv", slots=slots, keys=keys)
    return check(rec.trace(), None, clauses=["S5"])


def test_s5_a_commit_hands_the_tree_one_page_key_per_page_of_slots():
    assert commit_handing([0, 1, 2, 3], ("a", "b")) == []
    short = commit_handing([0, 1, 2, 3], ("a",))
    assert clauses_of(short) == {"S5"} and "hands the tree 4 slots of pool kv with 1 page key(s)" in short[0].message
    assert clauses_of(commit_handing([0, 1], ("a", "b"))) == {"S5"}


def test_s2_a_refused_start_that_still_moves_bytes():
    # The IO thread's re-check refused the next batch, and the thread went on with it anyway.
    run = Run().start()
    run.io("kv", KV)
    run.check_step(True, run.state(), terminate=True, tokens=0)
    io = run.rec.next_io_id()
    run.r(K.IO_REFUSED, pool="kv", space=HOST, slots=KV, io=io, value=LOAD)
    run.r(K.IO_LANDED, pool="kv", space=HOST, slots=KV, io=io)
    violations = check(run.trace(), CFG, clauses=["S2"])
    assert clauses_of(violations) == {"S2"} and violations[0].event.kind is K.IO_LANDED
    assert "refused" in violations[0].message


def test_s2_a_refused_start_that_stops_holds():
    run = Run().start()
    run.io("kv", KV)
    run.check_step(True, run.state(), terminate=True, tokens=0)
    run.r(K.IO_REFUSED, pool="kv", space=HOST, slots=KV, io=run.rec.next_io_id(), value=LOAD)
    assert check(run.trace(), CFG, clauses=["S2"]) == []


def test_s2_io_after_revoke():
    run = Run().start()
    run.r(K.REVOKE, value="short_hit")
    run.io("kv", KV)
    assert clauses_of(check(run.trace(), CFG, clauses=["S2"])) == {"S2"}


def test_s3_free_under_io():
    run = Run().start()
    io = run.io("kv", KV, end=False)
    run.r(K.TERMINATE, step=None, value=0)
    run.r(K.FREE, pool="kv", space=HOST, slots=KV)
    run.end_io(io, "kv", KV)
    run.r(K.FREE, pool="indexer", space=HOST, slots=KV)
    violations = check(run.trace(), CFG, clauses=["S3"])
    assert violations and all("freed while IO" in v.message for v in violations)
    assert [v.slot for v in violations] == list(KV)


def test_s3_leak_and_double_end():
    run = Run().start().load_all()
    run.check_step(True, run.state(), terminate=True).insert(pools=("kv",))
    leaked = check(run.trace(), CFG, clauses=["S3"])
    assert {v.slot for v in leaked} == set(KV) and all("leaked" in v.message for v in leaked)
    assert check(run.trace(), CFG, clauses=["S3"], closed=False) == []
    run.insert(pools=("indexer",))
    run.r(K.FREE, pool="indexer", space=HOST, slots=(0,))  # freed by the op after the tree took it
    double = check(run.trace(), CFG, clauses=["S3"])
    assert len(double) == 1 and "held by the tree" in double[0].message


def test_s3_slot_handed_out_twice():
    run = Run().start()
    run.r(K.ALLOC, op="r2", pool="kv", space=HOST, slots=(3,))
    violations = check(run.trace(), CFG, clauses=["S3"], closed=False)
    assert len(violations) == 1 and "allocated while still held by operation r1" in violations[0].message


def test_s4_ranks_commit_different_lengths():
    a = good_run(rank=0)
    b = Run(rank=1).start().load_all()
    b.check_step(True, b.state(), terminate=True, tokens=2).insert(slots=(0, 1))
    b.r(K.FREE, pool="kv", space=HOST, slots=(2, 3))
    b.r(K.FREE, pool="indexer", space=HOST, slots=(2, 3))
    violations = check([a.trace(), b.trace()], CFG, clauses=["S4"])
    assert len(violations) == 1 and "rank 0: 4, rank 1: 2" in violations[0].message


def test_s4_commit_missing_on_a_rank():
    a = good_run(rank=0)
    b = Run(rank=1).start()
    violations = check([a.trace(), b.trace()], CFG, clauses=["S4"])
    assert violations and "never on ranks [1]" in violations[0].message


def test_s5_loaded_bytes_must_equal_stored_bytes():
    run = good_run()
    run.r(K.PAGE_WRITE, op=None, pool="kv", keys=("aa", "bb"), digests=(page_digest(b"x"), page_digest(b"y")))
    run.r(K.LOAD_BACK, op=None, pool="kv", space=HOST, slots=(0, 2), keys=("aa", "bb"), digests=(page_digest(b"x"), page_digest(b"y")))
    assert check(run.trace(), CFG, clauses=["S5"]) == []
    run.r(K.LOAD_BACK, op=None, pool="kv", space=HOST, slots=(0, 2), keys=("aa", "bb"), digests=(page_digest(b"x"), page_digest(b"garbage")))
    violations = check(run.trace(), CFG, clauses=["S5"])
    assert len(violations) == 1 and violations[0].slot == 2 and "bb" in violations[0].message


def test_s5_a_load_fills_exactly_the_slots_of_its_page_keys():
    """One page of slots per key in a token pool, one slot per key in a state pool; an IO_START without keys is not judged."""
    run = Run()
    run.r(K.OP_START, value={"policy": run.policy.value, "start": 0.0, "page_size": PAGE, "requested_pages": 2, "state_pools": ["mamba"]})
    run.r(K.IO_START, pool="kv", space=HOST, slots=KV, io=1, value=LOAD, keys=("h0", "h1"))
    run.r(K.IO_START, pool="mamba", space=HOST, slots=(7,), io=2, value=LOAD, keys=("h1",))
    run.r(K.IO_START, pool="kv", space=HOST, slots=KV[PAGE:], io=3, value=LOAD)
    assert check(run.trace(), CFG, clauses=["S5"]) == []
    run.r(K.IO_START, pool="kv", space=HOST, slots=KV[PAGE:], io=4, value=LOAD, keys=("h0", "h1"))  # a page short
    run.r(K.IO_START, pool="mamba", space=HOST, slots=(7, 8), io=5, value=LOAD, keys=("h1",))
    violations = check(run.trace(), CFG, clauses=["S5"])
    assert [v.event.io for v in violations] == [4, 5] and "2 page key(s) of pool kv into 2 slots" in violations[0].message


def test_f3_insert_without_a_completed_load():
    run = Run().start()
    run.io("kv", KV)
    run.io("indexer", KV, ok=False)  # the sidecar came back short
    run.r(K.IO_DONE)
    run.check_step(True, run.state(), terminate=True).insert()
    violations = check(run.trace(), CFG, clauses=["F3"])
    assert {v.event.pool for v in violations} == {"indexer"} and len(violations) == 4


def test_decision_clause_named_for_a_wrong_vote():
    run = Run().start()
    run.io("kv", KV)
    run.check_step(True, run.state(pools_done=False), terminate=False)
    violations = check(run.trace(), CFG, clauses=["D"])
    assert clauses_of(violations) == {"D3"}


def test_x1_one_rank_terminates_alone():
    a = Run(rank=0).start().load_all()
    a.check_step(True, a.state(), terminate=True).insert()
    b = Run(rank=1).start()
    b.io("kv", KV)
    b.check_step(False, b.state(pools_done=False), terminate=False)
    violations = check([a.trace(), b.trace()], CFG, clauses=["X1"])
    assert len(violations) == 1 and violations[0].event.rank == 0 and "terminated r1 at step 1" in violations[0].message


def test_x1_peer_terminated_forces_everyone():
    a = Run(rank=0).start()
    a.check_step(False, a.state(completed=0, pools_done=False), terminate=False)
    b = Run(rank=1).start()
    b.check_step(False, b.state(completed=0, pools_done=False, terminated=True), terminate=True, tokens=0)
    violations = check([a.trace(), b.trace()], CFG, clauses=["X1"])
    assert len(violations) == 1 and violations[0].event.rank == 0 and "did not terminate" in violations[0].message


def test_x1_follows_the_votes_cast_a_wrong_vote_is_the_decision_clauses():
    # Both ranks past the deadline, KV complete, a pool transfer pending: the spec votes yes.
    # Rank 1 votes no (upstream's vote-forcing guard) and nobody terminates: D5, and not X1 too.
    runs = []
    for rank, vote in ((0, True), (1, False)):
        run = Run(rank=rank, policy="timeout").start()
        run.io("kv", KV)
        run.check_step(vote, run.state(pools_done=False, timed_out=True), terminate=False)
        runs.append(run)
    traces = [r.trace() for r in runs]
    assert clauses_of(check(traces, CFG, clauses=["D", "X1"])) == {"D5"}
    # Terminating anyway, against every vote cast, is X1's.
    runs[0].r(K.TERMINATE, step=1, value=4)
    assert clauses_of(check([r.trace() for r in runs], CFG, clauses=["D", "X1"])) == {"D5", "X1"}


def test_x2_collective_count():
    good = good_run(rank=0)
    run = Run(rank=1).start().load_all()
    run.check_step(True, run.state(), terminate=True, collectives=False).insert()
    violations = check([good.trace(), run.trace()], CFG, clauses=["X2"])
    assert len(violations) == 1 and violations[0].event.rank == 1 and "0 vote collectives" in violations[0].message
    # One rank alone has nobody to disagree with: a skipped no-op reduce is fine.
    assert check(run.trace(), CFG, clauses=["X2"]) == []


def test_x2_best_effort_runs_no_vote_collective():
    runs = []
    for rank in (0, 1):
        be = Run(rank=rank, policy="best_effort").start().load_all()
        be.check_step(True, be.state(), terminate=True).insert()
        runs.append(be)
    assert check([r.trace() for r in runs], CFG, clauses=["X2"]) == []
    runs[1].r(K.COLLECTIVE, step=1, value=VOTE_COLLECTIVE)
    violations = check([r.trace() for r in runs], CFG, clauses=["X2"])
    assert len(violations) == 1 and violations[0].message.startswith("1 vote collectives")


def test_f3_split_io_end_counts_only_the_pages_that_arrived():
    run = Run().start()
    io = run.rec.next_io_id()
    run.r(K.IO_START, pool="kv", space=HOST, slots=KV, io=io, value=LOAD)
    run.r(K.IO_END, pool="kv", space=HOST, slots=(0, 1), io=io, value=True)
    run.r(K.IO_END, pool="kv", space=HOST, slots=(2, 3), io=io, value=False)
    run.check_step(True, run.state(completed=2, hit=1), terminate=True, tokens=2).insert(pools=("kv",), slots=(0, 1))
    assert check(run.trace(), CFG, clauses=["F3"]) == []
    run.insert(pools=("kv",), slots=(2,))
    violations = check(run.trace(), CFG, clauses=["F3"])
    assert [v.slot for v in violations] == [2]


def test_l1_wait_complete_must_end_after_io():
    run = Run().start().load_all()
    run.check_step(False, run.state(), terminate=False)
    violations = check(run.trace(), CFG, clauses=["L1"], closed=False)
    assert len(violations) == 1 and "did not terminate" in violations[0].message


def test_l1_wait_complete_must_commit_the_whole_hit():
    run = Run().start().load_all()
    run.check_step(True, run.state(), terminate=True, tokens=2).insert(slots=(0, 1))
    violations = check(run.trace(), CFG, clauses=["L1"], closed=False)
    assert len(violations) == 1 and "must commit the whole hit (4)" in violations[0].message


def test_l1_owes_no_whole_hit_when_the_vote_stopped_before_the_io_ended():
    # No guard: the vote was yes with the indexer still loading; the fence committed nothing.
    run = Run().start()
    run.io("kv", KV)
    run.check_step(True, run.state(pools_done=False), terminate=True, tokens=0)
    run.io("indexer", KV)
    run.r(K.IO_DONE)
    trace = run.trace()
    assert check(trace, CFG, clauses=["L1"], closed=False) == []
    assert clauses_of(check(trace, CFG, clauses=["D"], closed=False)) == {"D3"}


def test_l1_does_not_demand_the_whole_hit_after_io_failure():
    run = Run().start()
    run.io("kv", (0, 1))
    run.io("kv", (2, 3), ok=False)
    run.r(K.HIT, value=1)  # trimmed
    run.io("indexer", (0, 1))
    run.r(K.IO_DONE)
    run.check_step(True, run.state(completed=2, hit=1), terminate=True, tokens=2).insert(slots=(0, 1))
    assert check(run.trace(), CFG, clauses=["L1"], closed=False) == []


def test_l2_vote_past_the_deadline():
    clock = ManualClock()
    run = Run(clock=clock, policy="timeout").start()
    clock.advance(1.0)  # exactly at the 1.0 s budget: not yet timed out
    run.check_step(False, run.state(completed=0, pools_done=False), terminate=False)
    assert check(run.trace(), CFG, clauses=["L2"]) == []
    clock.advance(0.5)
    run.check_step(False, run.state(completed=0, pools_done=False, timed_out=False), terminate=False)
    violations = check(run.trace(), CFG, clauses=["L2"])
    assert {v.message.split(" ")[0] for v in violations} == {"voted", "every"}


def test_l3_ranks_run_different_collectives():
    a = good_run(rank=0)
    b = Run(rank=1).start().load_all()
    b.check_step(True, b.state(), terminate=True).insert()
    b.r(K.COLLECTIVE, step=1, value=VOTE_COLLECTIVE, op="r9")  # an extra, rank-local check
    violations = check([a.trace(), b.trace()], CFG, clauses=["L3"])
    assert len(violations) == 1 and "step 1: rank 1" in violations[0].message


def test_violation_names_clause_event_and_slot():
    run = Run().start()
    run.io("kv", KV)
    run.io("indexer", KV, end=False)
    run.check_step(True, run.state(), terminate=True).insert()
    text = str(check(run.trace(), CFG, clauses=["S1"])[0])
    assert text.startswith("S1: inserted while IO")
    assert "slot 0" in text and "insert" in text and "pool indexer" in text


def test_unknown_checker_is_rejected():
    with pytest.raises(ValueError, match="clauses"):
        check(good_run().trace(), CFG, clauses=["S9"])


def test_duplicate_rank_traces_rejected():
    with pytest.raises(ValueError, match="one trace per rank"):
        check([good_run().trace(), good_run().trace()], CFG)


def test_device_space_io_guards_load_back():
    run = good_run()
    io = run.rec.next_io_id()
    run.r(K.IO_START, op=None, pool="kv", space=DEVICE, slots=(5,), io=io, value=LOAD_BACK_COPY)
    run.r(K.FREE, op=None, pool="kv", space=DEVICE, slots=(5,))
    violations = check(run.trace(), CFG, clauses=["S3"])
    assert len(violations) == 1 and violations[0].slot == 5


# --- L4: every transfer ends within a bound ----------------------------------------------

BOUND = 5.0


def hung_sidecar_run(*, expire_at=None, advance=BOUND + 1.0):
    """KV loaded; the indexer get hangs; a check `advance` seconds later; expired at `expire_at` seconds after it began."""
    run = Run().start(io_timeout_s=BOUND)
    run.io("kv", KV)
    hung = run.io("indexer", KV, end=False)
    begun = run.clock.now()
    if expire_at is not None:
        run.clock.set(begun + expire_at)
        run.r(K.IO_EXPIRED, pool="indexer", space=HOST, slots=KV, io=hung, value=BOUND)
    run.clock.set(begun + advance)
    return run, hung


def test_l4_a_hung_sidecar_counted_failed_at_the_check_past_its_bound_holds():
    run, hung = hung_sidecar_run()
    run.step += 1
    run.r(K.STEP, op=None, step=run.step)
    run.r(K.IO_EXPIRED, pool="indexer", space=HOST, slots=KV, io=hung, value=BOUND)
    state = run.state(pools_done=True)
    run.r(K.VOTE, step=run.step, value=True, state=state)
    run.r(K.TERMINATE, step=run.step, value=4)
    run.r(K.COMMIT, step=run.step, value=0)  # clamped to the indexer's 0 pages (F3)
    run.end_io(hung, "indexer", KV)  # the read returns long after: its slots are freed only now (F5)
    run.r(K.IO_DONE)
    for pool in ("kv", "indexer"):
        run.r(K.FREE, pool=pool, space=HOST, slots=KV)
    assert check(run.trace(), CFG) == []


def test_l4_a_vote_past_the_bound_with_the_load_still_running_is_caught():
    run, hung = hung_sidecar_run()
    run.check_step(False, run.state(pools_done=False), terminate=False)
    violations = check(run.trace(), CFG, clauses=["L4"])
    assert len(violations) == 1, violations
    assert "past its 5s bound" in violations[0].message and f"load {hung} of r1 (indexer)" in violations[0].message


def test_l4_a_vote_within_the_bound_owes_nothing():
    run, _ = hung_sidecar_run(advance=BOUND)  # exactly at the bound: not past it
    run.check_step(False, run.state(pools_done=False), terminate=False)
    assert check(run.trace(), CFG, clauses=["L4"]) == []


def test_l4_counting_a_load_failed_within_its_bound_is_caught():
    run, _ = hung_sidecar_run(expire_at=BOUND)
    violations = check(run.trace(), CFG, clauses=["L4"])
    assert len(violations) == 1 and "within its 5s bound" in violations[0].message


def test_l4_inserting_pages_of_a_load_counted_failed_is_caught():
    run = Run().start(io_timeout_s=BOUND)
    hung = run.io("kv", KV, end=False)
    run.clock.advance(BOUND + 1.0)
    run.r(K.IO_EXPIRED, pool="kv", space=HOST, slots=KV, io=hung, value=BOUND)
    run.end_io(hung, "kv", KV)  # it did return, with good bytes: too late to count
    run.io("indexer", KV)
    run.r(K.IO_DONE)
    run.check_step(True, run.state(), terminate=True).insert()
    violations = check(run.trace(), CFG, clauses=["L4"])
    assert {v.event.pool for v in violations} == {"kv"} and {v.slot for v in violations} == set(KV)
    assert all("counted failed" in v.message for v in violations)
