"""The cross-rank explorer's model and search, without ranks: schedules as strings, the reduction, the counts."""

from __future__ import annotations

import pytest

from conformance.multirank.explore.catalogue import SCENARIOS, SUITE
from conformance.multirank.explore.model import (
    CrossRankScenario, LocalView, Segment, enabled, format_schedule, interleavings, parse_schedule, read_setup,
)
from conformance.multirank.explore.search import RunLog, Search, SetupCounts, Step
from conformance.repro.cases import Case
from conformance.repro.script import render
from spec.errors import ConfigError


def view(*, parked=True, tracked=True, released=0, ticks=0, aborted=False, finished=None, io_done=False) -> LocalView:
    return LocalView(parked, tracked, released, io_done, ticks, aborted, finished)


def test_a_schedule_string_round_trips_setup_first():
    setup, actions = parse_schedule("fail1.2,io0,io1,check,tick1,check:io1", 2)
    assert setup == ("fail1.2",) and actions == ("io0", "io1", "check", "tick1", "check:io1")
    assert format_schedule(setup, actions) == "fail1.2,io0,io1,check,tick1,check:io1"
    assert parse_schedule("", 2) == ((), ())


@pytest.mark.parametrize("text, wrong", [("io0,miss1", "schedule[1]"), ("io2", "schedule[0]"), ("jump0", "schedule[0]"),
                                         ("fail0.0", "setup token")])
def test_a_bad_schedule_is_one_error_naming_the_token(text, wrong):
    with pytest.raises(ConfigError, match=wrong.replace("[", r"\[")):
        parse_schedule(text, 2)


def test_each_rank_reads_only_its_own_setup_but_every_rank_sees_when_the_second_request_comes():
    assert read_setup(("fail1.2",), 0, 2).failing_load is None
    assert read_setup(("fail1.2",), 1, 2).failing_load == 2
    assert read_setup(("room1p",), 0, 2).short_room is False and read_setup(("room1p",), 0, 2).second_request == "before"
    assert read_setup(("room1",), 1, 2).short_room is True and read_setup(("room1",), 1, 2).second_request == "during"
    assert read_setup(("miss0",), 0, 2).missing_tail


def test_between_two_checks_only_higher_ranks_act_after_a_rank_acted():
    s = CrossRankScenario("t", "wait_complete")
    views = [view(), view()]
    assert enabled(s, views, Segment(), 0, [0, 0], 0) == ("io0", "io1", "check")
    # After rank 1 acted, rank 0's actions would only reorder the segment: one class, one schedule.
    assert enabled(s, views, Segment(("io1",)), 1, [0, 0], 0) == ("io1", "check")
    assert enabled(s, views, Segment(("io0",)), 1, [0, 0], 0) == ("io0", "io1", "check")


def test_a_check_needs_an_action_since_the_last_one_and_nothing_is_enabled_once_no_rank_waits():
    s = CrossRankScenario("t", "wait_complete")
    assert "check" not in enabled(s, [view(), view()], Segment(), 1, [0, 0], 0)
    assert enabled(s, [view(tracked=False), view(tracked=False)], Segment(), 1, [0, 0], 0) == ()


def test_a_tick_comes_first_among_its_ranks_actions_and_only_after_a_check():
    s = CrossRankScenario("t", "timeout", ticks=1)
    assert "tick0" not in enabled(s, [view(), view()], Segment(), 0, [0, 0], 0)
    assert enabled(s, [view(), view()], Segment(), 1, [0, 0], 0)[:2] == ("tick0", "io0")
    assert "tick0" not in enabled(s, [view(), view()], Segment(("io0",)), 1, [0, 0], 0)
    assert "tick0" not in enabled(s, [view(), view()], Segment(), 1, [1, 0], 0)


def test_window_checks_let_a_timed_out_ranks_held_transfer_through_between_vote_and_terminate():
    s = CrossRankScenario("t", "timeout", ticks=1, window=True)
    options = enabled(s, [view(ticks=1), view(ticks=1)], Segment(("io0",)), 1, [1, 1], 0)
    assert options[-4:] == ("check", "check:io0", "check:io1", "check:io0:io1")


def test_a_bound_on_checks_ends_the_explored_part():
    s = CrossRankScenario("t", "wait_complete", checks=1)
    assert enabled(s, [view(), view()], Segment(), 1, [0, 0], 0) == ()


def test_one_abort_in_all():
    s = CrossRankScenario("t", "wait_complete", aborts=1)
    assert "abort1" in enabled(s, [view(), view()], Segment(), 0, [0, 0], 0)
    assert "abort1" not in enabled(s, [view(), view()], Segment(), 0, [0, 0], 1)


@pytest.mark.parametrize("actions, count", [
    (("io0", "io1"), 2),  # two ranks, one action each: two orders
    (("io0", "io0", "io1"), 3),  # 3! / (2! 1!)
    (("tick0", "io0", "io0"), 3),  # the tick anywhere among its rank's loads
    (("tick0", "io0", "abort0", "io1"), 2 * 4),  # before the abort only; rank 1's load anywhere among four
])
def test_a_segment_stands_for_every_interleaving_of_its_ranks_words(actions, count):
    assert interleavings(Segment(actions), 2) == count


def _log(setup, steps, final):
    return RunLog(setup, tuple(Step(options, state, action) for options, state, action in steps), final, cut=False)


def test_the_search_backtracks_to_the_deepest_untried_alternative_and_counts_the_graph():
    s = CrossRankScenario("t", "wait_complete")
    search = Search(s, ())
    first = search.first()
    assert first.prefix == () and not first.exact
    # A run: io0, then io0 again, then check (the request finished); the deepest untried alternative is io1 at step 2.
    log = _log((), [(("io0", "io1", "check"), "A", "io0"), (("io0", "io1", "check"), "B", "io0"), (("io1", "check"), "B1", "check")], "C")
    second = search.next(log)
    assert second.prefix == ("io0", "io1") and second.parent_enabled == (("io0", "io1", "check"), ("io0", "io1", "check"))
    assert "C" in second.visited
    counts = SetupCounts(())
    counts.add(log)
    counts.add(_log((), [(("io0", "io1", "check"), "A", "io1"), (("io1", "check"), "B2", "check")], "C"))
    assert counts.paths(2) == (2, 2)  # two paths from A to C, each a segment of one action


def test_a_replay_runs_its_actions_exactly_and_ends():
    search = Search(CrossRankScenario("t", "wait_complete"), (), only="miss1,io0,check")
    task = search.first()
    assert task.exact and task.setup == ("miss1",) and task.prefix == ("io0", "check")
    assert search.next(_log(task.setup, [(("io0", "check"), "A", "io0"), (("check",), "B", "check")], "C")) is None


def test_the_catalogue_names_every_suite_scenario_and_setups_cover_each_rank():
    assert set(SUITE) <= set(SCENARIOS)
    assert SCENARIOS["fault/wait_complete"].setups(("indexer",)) == [("fail0.1",), ("fail0.2",), ("fail1.1",), ("fail1.2",)]
    assert SCENARIOS["landed/wait_complete"].setups(("indexer",)) == [()]


def test_a_scenario_runs_the_fewest_extra_pools_an_adapter_allows():
    class Adapter:
        default_extra_pools = ("indexer", "mamba")
        capabilities = frozenset({"no_extra_pools"})

    assert CrossRankScenario("t", "wait_complete", sidecars=1).pools_for(Adapter()) == ("indexer",)
    assert CrossRankScenario("t", "wait_complete", sidecars=0).pools_for(Adapter()) == ()
    Adapter.capabilities = frozenset()
    assert CrossRankScenario("t", "wait_complete", sidecars=0).pools_for(Adapter()) == ("indexer",)


@pytest.mark.parametrize("fields, wrong", [({"world_size": 1}, "world_size"), ({"ticks": 1}, "ticks"), ({"room": "disk"}, "room"),
                                           ({"checks": 0}, "checks")])
def test_a_bad_scenario_is_one_error_naming_the_field(fields, wrong):
    with pytest.raises(ConfigError, match=wrong):
        CrossRankScenario("t", "wait_complete", **fields)


def test_a_reproduction_script_carries_a_cross_rank_schedule():
    scenario = SCENARIOS["abort/wait_complete"]
    case = Case("crossrank", {"scenario": scenario.as_fields(), "schedule": "abort1,check"}, "test_every_cross_rank_divergence[x]")
    entry = {"clause": "L3", "kind": "liveness", "title": "t", "implementations": ["x"], "sentence": "s", "tests": []}
    text = render(entry, {"x": case}, {"x": {"cache_impl": "caches.adapters:hiradix"}}, {}, "repro_l3.py")
    assert "replay_on_ranks(make_cache.adapter, scenario, 'abort1,check'" in text
    assert "On x: replays cross-rank scenario abort/wait_complete on 2 ranks, schedule 'abort1,check'." in text
    compile(text, "repro_l3.py", "exec")
