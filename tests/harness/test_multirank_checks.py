"""The multi-rank oracle's own rules on hand-built rank results (no ranks launched): one cause is named once."""

from __future__ import annotations

from spec import EventKind, TerminationConfig, TraceRecorder
from spec.trace import DEVICE, HOST, LOAD

from conformance.multirank.checks import scenario_problems
from conformance.multirank.records import RankScenarioResult, Scenario, ScenarioOutcome
from conformance.multirank.scenarios import SCENARIOS

CFG = TerminationConfig(policy="wait_complete", page_size=4, timeout_base_s=1.0, timeout_per_ki_token_s=0.0, timeout_max_s=1.0)
LEAK = "F8: cache 0 {name}: 4 of 64 slots still allocated after every prefetch ended and evict_all()"


def outcome_with(leaks: list[str], *, leak_in_trace: bool) -> ScenarioOutcome:
    recorder = TraceRecorder()
    if leak_in_trace:  # the operation's host slots, never inserted nor freed
        recorder.record(EventKind.ALLOC, op="r1", pool="kv", space=HOST, slots=[0, 1, 2, 3])
    rank = RankScenarioResult(scenario="s", rank=0, traces=[recorder.trace()], configs=[CFG], leaks=leaks)
    return ScenarioOutcome(Scenario(next(iter(SCENARIOS))), [rank])


def labelled(problems: list[str], clause: str) -> list[str]:
    return [p for p in problems if p.startswith(f"rank 0: {clause}:") or p.startswith(f"cache 0: {clause}:")]


def test_an_emptied_tier_holding_the_slots_the_trace_names_leaked_is_the_leak_s_consequence_not_a_second_defect():
    problems = scenario_problems(outcome_with([LEAK.format(name="host:kv")], leak_in_trace=True))
    assert labelled(problems, "S3"), problems
    assert not labelled(problems, "F8"), f"one cause named twice: {problems}"
    assert any(p.startswith("then (a consequence): rank 0: F8 cache 0 host:kv") for p in problems), problems


def test_slots_held_that_the_trace_never_saw_leak_are_f8():
    problems = scenario_problems(outcome_with([LEAK.format(name="host:kv")], leak_in_trace=False))
    assert labelled(problems, "F8") and not labelled(problems, "S3"), problems


def test_a_leak_in_another_tier_than_the_traced_one_is_still_named():
    problems = scenario_problems(outcome_with([LEAK.format(name=f"{DEVICE}:kv")], leak_in_trace=True))
    assert labelled(problems, "F8") and labelled(problems, "S3"), problems


def diverged_ranks() -> ScenarioOutcome:
    """Rank 1 ran a vote rank 0 never ran (one rank dropped r1 on its own), then the two committed different lengths."""
    ranks = []
    for rank, committed in ((0, 0), (1, 4)):
        recorder = TraceRecorder(rank=rank)
        recorder.record(EventKind.OP_START, op="r1", value={"policy": "wait_complete", "requested_pages": 1})
        recorder.record(EventKind.ALLOC, op="r1", pool="kv", space=HOST, slots=[0, 1, 2, 3])
        if rank == 1:
            recorder.record(EventKind.COLLECTIVE, op="r1", step=1, value="vote_max")
        recorder.record(EventKind.COMMIT, op="r1", step=1, value=committed)
        recorder.record(EventKind.FREE, op="r1", pool="kv", space=HOST, slots=[0, 1, 2, 3])
        ranks.append(RankScenarioResult(scenario="s", rank=rank, traces=[recorder.trace()], configs=[CFG],
                                        leaks=[LEAK.format(name="host:kv")] if rank == 1 else []))
    return ScenarioOutcome(Scenario(next(iter(SCENARIOS))), ranks)


def test_ranks_that_ran_different_collectives_are_named_for_that_alone():
    problems = scenario_problems(diverged_ranks())
    named = [p for p in problems if not p.startswith("then (a consequence): ")]
    assert named and all("L3: " in p for p in named), problems
    consequences = [p for p in problems if p.startswith("then (a consequence): ")]
    assert any("S4 " in p for p in consequences) and any("F8 " in p for p in consequences), problems
    assert not any(label in p for p in consequences for label in ("S4: ", "F8: ", "F3: ")), f"a consequence names a clause: {problems}"


def disagreeing_commits(rank1_commits: int, *, aborted: bool = True) -> ScenarioOutcome:
    """Both ranks run the same vote; rank 0 aborted r1 on its own clock before its page loaded (a REVOKE and an empty
    commit), rank 1 terminated it in the check: rank 0 commits 0, rank 1 `rank1_commits` tokens, and rank 1's device
    tier keeps what it inserted."""
    ranks = []
    for rank, committed in ((0, 0), (1, rank1_commits)):
        recorder = TraceRecorder(rank=rank)
        recorder.record(EventKind.OP_START, op="r1", value={"policy": "wait_complete", "requested_pages": 2})
        recorder.record(EventKind.ALLOC, op="r1", pool="kv", space=HOST, slots=list(range(8)))
        recorder.record(EventKind.HIT, op="r1", value=2)
        if rank == 1:
            recorder.record(EventKind.IO_START, op="r1", pool="kv", space=HOST, slots=[0, 1, 2, 3], io=1, value=LOAD)
            recorder.record(EventKind.IO_END, op="r1", pool="kv", space=HOST, slots=[0, 1, 2, 3], io=1, value=True)
        recorder.record(EventKind.COLLECTIVE, op="r1", step=1, value="vote_max")
        if rank == 0 and aborted:
            recorder.record(EventKind.REVOKE, op="r1", value="abort")
        else:
            recorder.record(EventKind.TERMINATE, op="r1", step=1)
        recorder.record(EventKind.COMMIT, op="r1", step=1, value=committed)
        recorder.record(EventKind.FREE, op="r1", pool="kv", space=HOST, slots=list(range(committed, 8)))
        if committed:
            recorder.record(EventKind.FREE, op="r1", pool="kv", space=HOST, slots=list(range(committed)))
        ranks.append(RankScenarioResult(scenario="s", rank=rank, traces=[recorder.trace()], configs=[CFG],
                                        leaks=[LEAK.format(name="device:kv")] if committed else []))
    return ScenarioOutcome(Scenario(next(iter(SCENARIOS))), ranks)


def own_findings(problems: list[str]) -> list[str]:
    return [p for p in problems if not p.startswith("then (a consequence): ")]


def test_ranks_that_committed_different_lengths_are_named_s4_and_the_slots_one_kept_are_its_consequence():
    problems = scenario_problems(disagreeing_commits(4))
    named = own_findings(problems)
    assert named and all("S4" in p and "F3" not in p and "F8" not in p for p in named), problems
    assert any(p.startswith("then (a consequence): rank 1: F8 cache 0 device:kv") for p in problems), problems


def test_a_rank_committing_past_the_pages_it_loaded_itself_is_still_f3_beside_the_disagreement():
    problems = scenario_problems(disagreeing_commits(8))  # rank 1 loaded one page and committed two
    assert any(p.startswith("S4/F3: r1:") for p in own_findings(problems)), problems


def test_ranks_that_both_terminated_in_the_check_and_differ_past_the_fence_name_f3_too():
    # Rank 0 loaded nothing and terminated in the same check: the MIN over ranks is 0, and rank 1's 4 tokens
    # break the clamp, not only the agreement (a commit clamped to this rank's own pools alone).
    problems = scenario_problems(disagreeing_commits(4, aborted=False))
    assert any(p.startswith("S4/F3: r1:") for p in own_findings(problems)), problems
