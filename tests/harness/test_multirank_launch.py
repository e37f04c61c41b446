"""The multi-rank launcher itself: order cases, hangs and failing ranks reported within their bounds, the first divergence named.

These check the harness, not an implementation (launch(None, ...) runs the
launcher's own scenarios), so they live here rather than in the suite,
whose items are one per implementation and device.
"""

from __future__ import annotations

import pytest

from conformance.bounds import HANG_S
from conformance.multirank import (
    LEVELS,
    MultiRankError,
    Scenario,
    first_divergence,
    launch,
    order_cases,
    scenario_problems,
)
from conformance.multirank.records import AdapterRef


def test_order_cases_cover_every_combination():
    timeout = order_cases("timeout", 2)
    assert len(timeout) == 36 and len(set(timeout)) == 36
    assert all(LEVELS.index(t) >= LEVELS.index(v) for case in timeout for v, t in case)
    assert len(order_cases("wait_complete", 2)) == 9


def test_hang_names_the_rank_the_step_and_the_divergent_collective(tmp_path):
    """Only rank 0 enters a collective: the launch fails within the bound, naming where each rank is."""
    with pytest.raises(MultiRankError) as raised:
        launch(None, [Scenario("skip_collective", {"hung_rank": 0})], world_size=2, device="cpu", workdir=tmp_path,
               hang_timeout_s=1.0, collective_timeout_s=60.0)
    message = str(raised.value)
    assert "rank 0 hung at step 'skip_collective(hung_rank=0) all_reduce on one rank only'" in message
    assert "last event: #0 collective rank 0 op r1 step 1 value 'vote_max'" in message
    assert "rank 1 hung at step 'scenario 0 done, waiting for every rank'" in message
    assert "L3: collective #1 differs across ranks: rank 0 vote_max(op r1, step 1), rank 1 nothing" in message


def test_a_failing_rank_is_reported_and_stops_the_launch(tmp_path):
    scenarios = [Scenario("raise_on_rank", {"failing_rank": 1}), Scenario("raise_on_rank", {"failing_rank": 0})]
    result = launch(None, scenarios, world_size=2, device="cpu", workdir=tmp_path, hang_timeout_s=HANG_S)
    assert len(result.outcomes) == 1, "ranks must stop after a scenario failed on any rank"
    problems = scenario_problems(result.outcomes[0])
    assert len(problems) == 1 and problems[0].startswith("rank 1 failed at about to fail:"), problems
    assert "RuntimeError: deliberate failure" in problems[0]


def test_first_divergence_names_position_and_ranks():
    assert first_divergence({0: ["a()", "b()"], 1: ["a()", "b()"]}) is None
    assert first_divergence({0: ["a()", "b()"], 1: ["a()", "c(step 2)"]}) == "L3: collective #2 differs across ranks: rank 0 b(), rank 1 c(step 2)"
    assert first_divergence({0: ["a()"], 1: []}) == "L3: collective #1 differs across ranks: rank 0 a(), rank 1 nothing"


def _exit_at_once() -> None:
    pass


def _block_until(released) -> None:
    released.wait(60.0)  # bounded: the test releases it once the supervisor has spoken


def test_a_collective_that_an_exited_rank_never_took_is_named_l3(tmp_path):
    """Rank 0 exited after two collectives; rank 1 still waits after a third of its own: it diverged (L3), not merely hung."""
    import json
    import multiprocessing

    from conformance.multirank.launch import _supervise

    (tmp_path / "heartbeat0.txt").write_text(json.dumps(
        {"phase": "scenario 0", "last": "", "collectives": ["vote_max()", "vote_max()"], "deaths": []}))
    (tmp_path / "heartbeat1.txt").write_text(json.dumps(
        {"phase": "scenario 0 done, waiting for every rank", "last": "#9 collective rank 1 value 'commit_min'",
         "collectives": ["vote_max()", "vote_max()", "commit_min()"], "deaths": []}))
    context = multiprocessing.get_context("spawn")
    released = context.Event()
    procs = [context.Process(target=_exit_at_once), context.Process(target=_block_until, args=(released,))]
    for proc in procs:
        proc.start()
    try:
        procs[0].join(30.0)
        message = _supervise(procs, tmp_path, hang_timeout_s=0.5, total_timeout_s=30.0, startup_timeout_s=0.5)
    finally:
        released.set()
        for proc in procs:
            proc.join(30.0)
    assert message is not None and "ranks [0] had exited" in message
    assert "L3: collective #3 differs across ranks: rank 0 nothing, rank 1 commit_min()" in message


def _sleep_then_exit(seconds: float) -> None:
    import time

    time.sleep(seconds)


def test_a_rank_that_wrote_no_heartbeat_yet_is_under_the_startup_bound(tmp_path):
    """A rank still starting (no heartbeat file yet: a fork, heavy imports on a loaded machine) is not stalled after the
    hang bound: it is judged by the startup bound until its first heartbeat."""
    import multiprocessing

    from conformance.multirank.launch import _supervise

    context = multiprocessing.get_context("spawn")
    procs = [context.Process(target=_sleep_then_exit, args=(1.5,))]
    for proc in procs:
        proc.start()
    try:
        message = _supervise(procs, tmp_path, hang_timeout_s=0.3, total_timeout_s=30.0, startup_timeout_s=20.0)
    finally:
        for proc in procs:
            proc.join(30.0)
    assert message is None, f"a rank still starting was reported stalled: {message}"


def _beat_then_sleep(path: str, beat: str, seconds: float) -> None:
    import time
    from pathlib import Path

    Path(path).write_text(beat)
    time.sleep(seconds)


def _supervise_one_quiet_rank(tmp_path, *, setup: bool) -> str | None:
    import json
    import multiprocessing

    from conformance.multirank.launch import _supervise

    beat = json.dumps({"phase": "scenario 0 creating cache 0", "setup": setup, "last": "", "collectives": [], "deaths": []})
    context = multiprocessing.get_context("spawn")
    procs = [context.Process(target=_beat_then_sleep, args=(str(tmp_path / "heartbeat0.txt"), beat, 1.5))]
    for proc in procs:
        proc.start()
    try:
        return _supervise(procs, tmp_path, hang_timeout_s=0.3, total_timeout_s=30.0, startup_timeout_s=20.0)
    finally:
        for proc in procs:
            proc.join(30.0)


def test_a_rank_building_its_cache_is_under_the_startup_bound_not_the_hang_bound(tmp_path):
    """Building a cache (an upstream tree's imports, pools and threads) on a loaded machine can take longer than the
    hang bound without a new heartbeat: a setup step is judged by the startup bound, a running step by the hang bound."""
    assert _supervise_one_quiet_rank(tmp_path, setup=True) is None
    message = _supervise_one_quiet_rank(tmp_path, setup=False)
    assert message is not None and "hung at step 'scenario 0 creating cache 0'" in message, message


def test_a_rank_closing_its_cache_is_under_the_startup_bound_not_the_hang_bound(tmp_path):
    """A close that joins threads within their own bounds outlasts the 1 s hang bound: not a stuck run."""
    ref = AdapterRef("factory", "tests.harness.slow_close_adapter:slow_close_hiradix", "hiradix")
    result = launch(ref, [Scenario("storage_miss_on_one_rank", {"missing_rank": 1})], world_size=2, device="cpu",
                    workdir=tmp_path, hang_timeout_s=1.0)
    assert not result.fatal, result.fatal
    assert [scenario_problems(outcome) for outcome in result.outcomes] == [[]]
