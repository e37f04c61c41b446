"""Failures into defect entries: a failure's causes (conformance/report/causes.py), event sites (sites.py), grouping (defects.py).

The messages below are the harness's own wording (a trace violation, a
multi-rank launch, a thread that died); grouping is judged on report data
shaped as the recorder writes it.
"""

from __future__ import annotations

from conformance.report import sites
from conformance.report.causes import causes_in, event_of, labelled_lines, template
from conformance.report.defects import group, origin_key
from spec.clock import ManualClock
from spec.config import TerminationConfig
from spec.decision import DecisionState
from spec.trace import EventKind, TraceRecorder

LIVE = [{"name": f"sglang-live:{c}@abc", "source": "--sglang-live", "source_value": "/t/sgl@abc"} for c in ("HiRadixCache", "HiMambaRadixCache")]
S3_LINE = "S3: freed while IO {io} into or out of it is in flight slot 1 at #{seq} free rank 0 op {op} pool mamba space host slots [1]"


def failed(nodeid: str, impl: str, *lines: str, causes: list | None = None) -> dict:
    named = {line.split(":")[0].split("/")[0]: line for line in lines}
    return {"nodeid": nodeid, "impl": impl, "device": "cpu", "outcome": "fail", "weak": None, "failed_clauses": named, "causes": causes}


def by_id(entries):
    return {e["id"]: e for e in entries}


# --- one failure's causes -----------------------------------------------------------------------

def test_a_line_naming_two_clauses_is_one_cause_led_by_the_first():
    (cause,) = causes_in("orders(cases=<9 items>): ranks 0, 1 failed: D5/L2: at cache 0 check 4, rank 1 voted no on o3")
    assert (cause.clause, cause.also, cause.signature) == ("D5", ["L2"], None)


def test_an_event_in_the_line_gives_the_signature_without_numbers_or_request_ids():
    one = causes_in(S3_LINE.format(io=7, seq=31, op="explored"))[0]
    other = causes_in(S3_LINE.format(io=9, seq=28, op="r1"))[0]
    assert one.signature == other.signature == "S3 free mamba host: freed while IO # into or out of it is in flight slot #"
    assert event_of(S3_LINE.format(io=7, seq=31, op="x")) == {"seq": 31, "kind": "free", "rank": 0, "op": "x", "pool": "mamba", "space": "host"}


def test_a_thread_that_died_is_the_cause_whatever_else_the_test_saw():
    message = ("L1: faulty: all its IO had ended\nL5: prefetches ['faulty'] never finished: the implementation's background threads "
               "failed: L5: upstream's prefetch_io_aux_thread ended on InjectedFault: injected fault 'x' at #21 io_start rank 0 op faulty pool kv")
    (cause,) = causes_in(message)
    assert (cause.clause, cause.thread, cause.signature) == ("L5", "prefetch_io_aux_thread", "L5 thread prefetch_io_aux_thread")


class ClosedCacheWithADeadThread:
    def background_errors(self):
        return ["c-r0-io thread failed on request r1: StorageClosedError: FileStorage was used after close()"]


def test_a_death_the_failure_quotes_as_what_followed_is_not_its_cause():
    """close() returned with its IO thread running (F5); released, the thread died on the closed storage: F5 is the
    cause, the death beside it. The same death the line does not quote is still the cause."""
    death = ClosedCacheWithADeadThread().background_errors()[0]
    observed = [(None, None, ClosedCacheWithADeadThread())]
    (cause,) = causes_in(f"F5: close() returned while ['c-r0-io'] still ran r1's held KV batch; the thread, released: {death}", observed)
    assert cause.clause == "F5"
    (cause,) = causes_in("F5: close() returned while ['c-r0-io'] still ran r1's held KV batch", observed)
    assert cause.clause == "L5"


def test_a_wrong_vote_in_the_trace_causes_the_wait_that_did_not_end():
    clock = ManualClock(1000.0)
    trace = sites.attach(TraceRecorder(clock))
    config = TerminationConfig(policy="timeout", page_size=4)
    state = DecisionState(policy=config.policy, page_size=4, hit_pages=2, completed_tokens=8, timed_out=True,
                          pool_transfers_present=True, pool_transfers_done=False, terminated=False)
    trace.record(EventKind.OP_START, op="r1", value={"policy": "timeout", "requested_pages": 2})
    trace.record(EventKind.STEP, step=1)
    trace.record(EventKind.VOTE, op="r1", step=1, value=False, state=state)  # the spec votes yes: timed out
    (cause,) = causes_in("L2: every rank was past the deadline, yet the check did not terminate the prefetch", [(trace, config, None)])
    assert cause.clause == "D5" and cause.signature == "D5 vote: voted False where the spec votes True (divergence landed-kv-waits)"
    assert cause.excerpt[-1].startswith(">> #2 vote") and "test_defects.py" in cause.sites[0]


def test_templates_drop_what_differs_between_runs():
    assert template("committed 8 of 16 tokens of r1 at 'x'", ["r1"]) == "committed # of # tokens of <op> at '…'"
    assert labelled_lines("no clause here\nF8: leaked 3 slots\nF8: leaked 4 slots") == [(["F8"], "F8: leaked 3 slots")]


# --- where events came from ---------------------------------------------------------------------

def test_an_event_site_is_the_first_frame_outside_the_harness():
    trace = sites.attach(TraceRecorder(ManualClock(0.0)))
    assert sites.attach(trace) is trace  # attaching twice changes nothing
    event = trace.record(EventKind.STEP, step=1)
    site = sites.sites(trace)[event.seq]
    assert site.startswith("tests/harness/test_defects.py:") and "(test_an_event_site_is_the_first_frame_outside_the_harness)" in site
    assert sites.sites(TraceRecorder()) == {}


def test_a_site_is_shown_by_module_not_by_machine_path():
    assert sites.shown_path("/any/where/python/sglang/srt/mem_cache/x.py", "sglang.srt.mem_cache.x") == "sglang/srt/mem_cache/x.py"
    assert sites.shown_path("/a/pkg/__init__.py", "pkg") == "pkg/__init__.py"
    assert sites.shown_path("/a/script.py", "__main__") == "script.py"


# --- grouping -----------------------------------------------------------------------------------

def test_failures_at_the_same_event_are_one_entry_listing_each_test_once():
    impl = LIVE[1]["name"]
    tests = [failed("t.py::w1", impl, S3_LINE.format(io=7, seq=31, op="r1")),
             failed("t.py::explore[a]", impl, S3_LINE.format(io=9, seq=34, op="explored")),
             failed("t.py::abort", impl, S3_LINE.format(io=7, seq=28, op="faulty"))]
    entries, unattributed = group(tests + tests[:1], LIVE)
    assert unattributed == [] and [e["id"] for e in entries] == ["S3"]
    assert [t["nodeid"] for t in entries[0]["tests"]] == ["t.py::abort", "t.py::explore[a]", "t.py::w1"]


def test_a_cause_without_an_event_joins_the_one_entry_of_its_clause_on_the_same_code():
    radix, mamba = LIVE[0]["name"], LIVE[1]["name"]
    tests = [failed("t.py::explore", mamba, "D5: voted False where the spec votes True at #31 vote rank 0 op explored step 3 value False"),
             failed("t.py::table", radix, "D5: timeout, hit 2 pages, completed 8 tokens: decided wait"),
             failed("t.py::ranks", mamba, "ranks 0, 1 failed: D5/L2: at cache 0 check 4, rank 1 voted no")]
    (entry,) = group(tests, LIVE)[0]
    assert entry["implementations"] == [mamba, radix] and entry["also"] == ["L2"] and len(entry["tests"]) == 3


def test_an_entry_is_headlined_by_a_real_trigger_over_an_injected_one():
    mamba = LIVE[1]["name"]
    thread = {"clause": "L5", "signature": "L5 thread prefetch_io_aux_thread", "thread": "prefetch_io_aux_thread", "sites": [], "excerpt": []}
    injected = {**thread, "line": "L5: upstream's prefetch_io_aux_thread ended on InjectedFault: injected fault 'storage raises at KV batch 1'"}
    short_read = {**thread, "line": "L5: upstream's prefetch_io_aux_thread ended on OSError: Short read for ab12__0_1 in _page_transfer "
                                    "(prefetch of faulty); its loop catches only queue.Empty"}
    tests = [failed("t.py::raising", mamba, injected["line"], causes=[injected]),
             failed("t.py::truncated", mamba, short_read["line"], causes=[short_read])]
    (entry,) = group(tests, LIVE)[0]
    assert entry["sentence"].startswith("upstream's prefetch_io_aux_thread ended on OSError: Short read") and len(entry["tests"]) == 2


def test_implementations_of_different_code_never_share_an_entry():
    tests = [failed("t.py::a[x]", "variant_a", "S6: served 16 tokens of another configuration"),
             failed("t.py::a[y]", "variant_b", "S6: served 16 tokens of another configuration")]
    assert [e["implementations"] for e in group(tests)[0]] == [["variant_a"], ["variant_b"]]
    assert origin_key("variant_a", LIVE) == "variant_a" and origin_key(LIVE[0]["name"], LIVE) == "--sglang-live /t/sgl@abc"


def test_defects_come_before_hardening_and_ids_number_a_clause_with_several_entries():
    impl = LIVE[0]["name"]
    tests = [failed("t.py::cfg", impl, "C2: accepted page_size -4"),
             failed("t.py::io", impl, "L5: upstream's backup_thread ended on OSError"),
             failed("t.py::get", impl, "L5: upstream's prefetch_io_aux_thread ended on OSError"),
             failed("t.py::silent", impl, "no clause named here")]
    entries, unattributed = group(tests, LIVE)
    assert [(e["id"], e["verdict"]) for e in entries] == [("L5-1", "defect"), ("L5-2", "defect"), ("C2", "hardening")]
    assert {e["thread"] for e in entries[:2]} == {"backup_thread", "prefetch_io_aux_thread"} and unattributed == ["t.py::silent"]


def test_weak_and_passing_tests_are_no_defect():
    impl = LIVE[0]["name"]
    tests = [dict(failed("t.py::weak", impl, "S5: bytes differ"), weak="a control"), dict(failed("t.py::ok", impl, "S5: x"), outcome="pass")]
    assert group(tests, LIVE) == ([], [])
