"""The multi-rank oracle's own rules on hand-built rank results (no ranks launched): one cause is named once."""

from __future__ import annotations

from spec import EventKind, TerminationConfig, TraceRecorder
from spec.trace import DEVICE, HOST

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
