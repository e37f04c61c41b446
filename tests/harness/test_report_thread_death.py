"""One cause, one entry: a background thread's death (L5) is judged before the slots it strands, whichever check raised first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spec import TerminationConfig, TraceRecorder

from conformance.multirank.checks import scenario_problems
from conformance.multirank.records import RankScenarioResult, Scenario, ScenarioOutcome
from conformance.multirank.scenarios import SCENARIOS

DEATH = "hiradix-r0-io thread failed on request r1: KeyError: 'planted'"

ADAPTERS = f'''
from caches.adapters import hiradix


class Dying:
    def __init__(self, session):
        self._session = session

    def __getattr__(self, name):
        return getattr(self._session, name)

    def background_errors(self):
        return ["{DEATH}"]


class Adapter:
    def __init__(self):
        self._base = hiradix()
        self.name = "dying"
        self.capabilities = self._base.capabilities
        self.default_extra_pools = ()

    def create(self, env):
        return Dying(self._base.create(env))


def dying():
    return Adapter()
'''

# The leak check raises first, as check_outcome's does once every prefetch ended.
SUITE = '''
import pytest


@pytest.mark.clause("F8", "S3")
def test_nothing_left_allocated(make_cache):
    make_cache()
    raise AssertionError("F8/S3: slots still allocated after evict_all (leaked): {'host:kv': 4}")
'''


def test_a_leak_seen_after_a_thread_died_is_that_death_in_the_matrix_and_the_entries(subprocess_pytest, tmp_path: Path):
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "dying_adapters.py").write_text(ADAPTERS)
    (tmp_path / "test_dying.py").write_text(SUITE)
    result = subprocess_pytest.run(tmp_path, "--cache-impl", "dying_adapters:dying", "-q", "-k", "cpu", "test_dying.py",
                                   "--conformance-report", str(tmp_path / "run"))
    assert result.returncode == 1, result.stdout + result.stderr
    data = json.loads((tmp_path / "run.json").read_text())
    (test,) = [t for t in data["tests"] if t["outcome"] == "fail"]
    assert list(test["failed_clauses"]) == ["L5"] and DEATH in test["failed_clauses"]["L5"], test["failed_clauses"]
    assert [e["id"] for e in data["defects"]["entries"]] == ["L5"]
    row = data["matrix"]["dying"]["cpu"]
    assert row["F8"] != "defect" and row["S3"] != "defect", row


def test_a_rank_whose_thread_died_names_that_death_and_not_the_slots_it_left():
    leak = "F8: cache 0 host:kv: 4 of 64 slots still allocated after every prefetch ended and evict_all()"
    config = TerminationConfig(policy="wait_complete", page_size=4)
    rank = RankScenarioResult(scenario="s", rank=0, traces=[TraceRecorder().trace()], configs=[config], leaks=[leak],
                              background_errors=[f"L5: {DEATH}"])
    problems = scenario_problems(ScenarioOutcome(Scenario(next(iter(SCENARIOS))), [rank]))
    assert problems and "L5: " in problems[0], problems
    assert not any(p.startswith(("rank 0: F8:", "cache 0: F8:")) for p in problems), f"one cause named twice: {problems}"


@pytest.mark.parametrize("clauses", [["F8"], ["L1", "F8"]])
def test_the_clauses_a_failure_names_are_the_death_s_alone(clauses):
    from types import SimpleNamespace

    from conformance.report.failures import PROP_FAILED, failure_properties

    error = SimpleNamespace(value=AssertionError("\n".join(f"{c}: what the test saw" for c in clauses)))
    named = dict(failure_properties(error, death=f"L5: {DEATH}"))
    assert json.loads(named[PROP_FAILED]) == {"L5": f"L5: {DEATH}"}
    assert list(json.loads(dict(failure_properties(error))[PROP_FAILED])) == clauses
