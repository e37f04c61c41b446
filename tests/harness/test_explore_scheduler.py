"""The deterministic scheduler itself (conformance/scenarios/explore.py), run on the built-in hiradix cache.

The cache is reached like any adapter: through its factory and the adapter
protocol. A few tests wrap a real session to inject one misbehaviour, to
show how the explorer reports it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from conformance.scenarios import catalogue, explore
from conformance.adapter import CacheEnv
from conformance.scenarios.explore import ExplorationError, NondeterminismError, ReplayError, format_schedule, parse_schedule, replay
from conformance.scenarios.catalogue import Scenario
from conformance.scenarios.schedule_model import expected_schedules
from conformance.implementations.loader import load_factory
from spec.clock import ManualClock
from spec.config import TerminationConfig
from spec.errors import ConfigError
from spec.trace import TraceRecorder

ADAPTER = "caches.adapters:hiradix"


@pytest.fixture
def make_cache(tmp_path: Path, cache_factory):
    """Adapter sessions, ended by the shared factory (tests/conftest.py)."""
    adapter = load_factory(ADAPTER)()

    def make(policy: str = "wait_complete", page_size: int = 4, *, storage_dir: Path | None = None, **fields):
        termination = fields.pop("termination", None) or TerminationConfig(policy=policy, page_size=page_size)
        clock = fields.pop("clock", None) or ManualClock(1000.0)
        env = CacheEnv(
            device="cpu",
            termination=termination,
            storage_dir=storage_dir or tmp_path / "storage",
            clock=clock,
            trace=fields.pop("trace", None) or TraceRecorder(clock),
            extra_pools=tuple(fields.pop("extra_pools", adapter.default_extra_pools)),
            **fields,
        )
        return cache_factory.adopt(adapter.create(env))

    return make


def kv_only(policy: str, **fields) -> Scenario:
    return Scenario(f"tiny-{policy}", policy, kv_batches=2, batch_pages=1, extra_pools=(), **fields)


# --- enumeration --------------------------------------------------------------------------

def test_wait_complete_enumerates_every_placement_of_checks(make_cache, tmp_path):
    result = explore.explore(make_cache, kv_only("wait_complete"), storage_dir=tmp_path / "s")
    # A check may come before each IO step (never twice in a row); the last check ends it.
    assert result.schedules == [
        "io,io,check",
        "io,check,io,check",
        "check,io,io,check",
        "check,io,check,io,check",
    ]


def test_best_effort_ends_at_the_first_check_and_drains_the_parked_step(make_cache, tmp_path):
    result = explore.explore(make_cache, kv_only("best_effort"), storage_dir=tmp_path / "s")
    # After terminate the parked batch ends; the next batch never starts (F1).
    assert result.schedules == ["io,io,check", "io,check,io", "check,io"]


def test_extra_pool_adds_one_io_step_and_doubles_wait_complete(make_cache, tmp_path):
    scenario = Scenario("tiny-indexer", "wait_complete", kv_batches=2, batch_pages=1, extra_pools=("indexer",))
    result = explore.explore(make_cache, scenario, storage_dir=tmp_path / "s")
    assert result.count == 8 == expected_schedules(scenario, 1)
    assert result.extra_pools == 1
    assert all(s.count("io") == 3 for s in result.schedules)


def test_counts_match_the_spec_model_with_tick_and_abort(make_cache, tmp_path):
    scenario = kv_only("timeout", ticks=1, aborts=1)
    result = explore.explore(make_cache, scenario, storage_dir=tmp_path / "s")
    assert result.count == expected_schedules(scenario, 0) == 50
    assert len(set(result.schedules)) == result.count
    assert any("tick" in s and "abort" in s for s in result.schedules)


@pytest.mark.parametrize(
    ("policy", "kv", "extras", "want"),
    [("wait_complete", 1, 0, 2), ("wait_complete", 3, 0, 8), ("wait_complete", 2, 2, 16),
     ("best_effort", 3, 0, 4), ("best_effort", 2, 2, 5), ("timeout", 3, 1, 16)],
)
def test_expected_schedules_without_tick_or_abort(policy, kv, extras, want):
    # wait_complete/timeout: 2 ** steps (a check or not before each step); best_effort: steps + 1 (KV only).
    assert expected_schedules(Scenario("m", policy, kv_batches=kv, batch_pages=1), extras) == want


# --- replay -------------------------------------------------------------------------------

def test_replay_reproduces_a_recorded_schedule_exactly(make_cache, tmp_path):
    scenario = Scenario("tiny-replay", "timeout", kv_batches=2, batch_pages=1, extra_pools=("indexer",), ticks=1, aborts=1)
    result = explore.explore(make_cache, scenario, storage_dir=tmp_path / "s")
    chosen = next(s for s in result.schedules if "tick" in s and s.count("check") >= 2)
    first = replay(make_cache, scenario, chosen, storage_dir=tmp_path / "s")
    second = replay(make_cache, scenario, chosen, enabled=first.enabled, storage_dir=tmp_path / "s")
    assert first.text == second.text == chosen
    assert first.kinds == second.kinds
    assert "terminate" in first.kinds and first.kinds[0] == "op_start"
    assert first.committed == second.committed


def test_replay_of_a_prefix_completes_it_with_the_first_enabled_actions(make_cache, tmp_path):
    result = replay(make_cache, kv_only("wait_complete"), "check", storage_dir=tmp_path / "s")
    assert result.text == "check,io,io,check"
    assert result.committed == 8


def test_replay_rejects_an_action_that_is_not_enabled(make_cache, tmp_path):
    with pytest.raises(ReplayError, match=r"action 1 'check' of 'check,check' is not enabled after 'check' \(enabled: io, tick\)"):
        replay(make_cache, kv_only("wait_complete", ticks=1), "check,check", storage_dir=tmp_path / "s")


def test_replay_rejects_a_schedule_longer_than_the_run(make_cache, tmp_path):
    with pytest.raises(ReplayError, match="the run ended after 'io,io,check', before the rest of 'io,io,check,io'"):
        replay(make_cache, kv_only("wait_complete"), "io,io,check,io", storage_dir=tmp_path / "s")


def test_replay_detects_different_enabled_actions(make_cache, tmp_path):
    with pytest.raises(NondeterminismError, match=r"\('check',\) on an earlier run and \('io', 'check'\) now"):
        replay(make_cache, kv_only("wait_complete"), "io", enabled=[("check",)], storage_dir=tmp_path / "s")


# --- failures are named and replayable --------------------------------------------------------

class _Wrapped:
    """A real session with one method replaced (fault injection into the harness's view)."""

    def __init__(self, session) -> None:
        self._session = session
        self.pools = session.pools

    def __getattr__(self, name):
        return getattr(self._session, name)


class _FlipsFullLoads(_Wrapped):
    def load_back(self, tokens):
        loaded = self._session.load_back(tokens)
        if loaded.tokens == len(tokens):
            kv = loaded.data["kv"].view(torch.uint8)
            kv[0, ...] ^= 0xFF
        return loaded


def test_a_failing_schedule_is_named_with_its_replay(make_cache, tmp_path):
    def make_corrupting(**fields):
        return _FlipsFullLoads(make_cache(**fields))

    with pytest.raises(ExplorationError) as info:
        explore.explore(make_corrupting, kv_only("best_effort"), storage_dir=tmp_path / "s")
    error = info.value
    # Depth first: "io,io,check" (the only full load) comes first.
    assert error.schedule == "io,io,check" and error.explored == 0
    message = str(error)
    assert "S5: pool kv: loaded bytes differ" in message
    assert "replay: explore.replay(make_cache, catalogue.SCENARIOS['tiny-best_effort'], 'io,io,check')" in message
    with pytest.raises(AssertionError, match="S5: pool kv"):
        replay(make_corrupting, kv_only("best_effort"), error.schedule, storage_dir=tmp_path / "s")


class _NeverPrefetches(_Wrapped):
    def prefetch(self, request_id, tokens):
        return len(tokens)  # claims a prefetch but queues nothing


def test_a_wait_that_never_ends_is_bounded_and_says_what_hung(make_cache, tmp_path):
    with pytest.raises(ExplorationError, match=r"after prefetch: the IO thread of explored reaching IO step 1's gate or recording io_done did not happen within 0\.3s"):
        explore.explore(lambda **f: _NeverPrefetches(make_cache(**f)), kv_only("wait_complete"), storage_dir=tmp_path / "s", timeout_s=0.3)


# --- parsing and validation -------------------------------------------------------------------

def test_schedule_text_round_trips():
    assert parse_schedule("io, check,tick,abort") == ("io", "check", "tick", "abort")
    assert format_schedule(parse_schedule("io,check")) == "io,check"
    assert parse_schedule("") == ()


def test_unknown_action_is_rejected_naming_it():
    with pytest.raises(ConfigError, match=r"schedule\[1\].*'wait'.*io, check, tick, abort"):
        parse_schedule("io,wait")


@pytest.mark.parametrize(
    ("fields", "field"),
    [({"policy": "eventually"}, "policy"), ({"policy": "timeout", "kv_batches": 0}, "kv_batches"),
     ({"policy": "timeout", "ticks": -1}, "ticks"), ({"policy": "timeout", "extra_pools": "indexer"}, "extra_pools")],
)
def test_bad_scenario_fields_are_rejected(fields, field):
    with pytest.raises(ConfigError, match=field):
        Scenario("bad", **fields)


def test_catalogue_covers_every_policy_with_tick_and_abort():
    scenarios = list(catalogue.SCENARIOS.values())
    for policy in ("best_effort", "wait_complete", "timeout"):
        mine = [s for s in scenarios if s.policy == policy]
        assert any(s.aborts for s in mine) and any(not s.aborts and not s.ticks for s in mine)
        assert any(s.ticks for s in mine)
        assert {s.kv_batches for s in mine} == {2, 3}
