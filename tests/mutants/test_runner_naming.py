"""A kill whose first failure names no clause: the suite runs once more past every failure, and a later failure naming one is the kill's."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from conformance.mutants import runner
from conformance.mutants.first_failure import RESULT_ENV, FirstFailure
from conformance.report.failures import PROP_FAILED

UNNAMED = "conformance/suite/test_fence.py::test_setup_sees_the_consequence"
NAMING = "conformance/suite/test_anchor_pins.py::test_names_the_cause"


def report(nodeid: str, clause: str | None):
    named = {clause: f"{clause}: the cause"} if clause else {}
    return SimpleNamespace(nodeid=nodeid, failed=True, skipped=False, when="call",
                           user_properties=[(PROP_FAILED, json.dumps(named))], longreprtext="E   AssertionError: test setup: nothing loaded")


class ScriptedRuns:
    """Stands in for the child pytest: each run writes, through the real plugin, the failures it is given."""

    def __init__(self, *runs):
        self.runs = list(runs)
        self.commands: list[list[str]] = []

    def __call__(self, command, env, log_path, limit_s):
        self.commands.append(command)
        code, failures = self.runs.pop(0)
        plugin = FirstFailure(env[RESULT_ENV])
        plugin.pytest_collection_finish(SimpleNamespace(items=[SimpleNamespace(nodeid=n) for n in (UNNAMED, NAMING)]))
        for nodeid, clause in failures:
            plugin.pytest_runtest_logreport(report(nodeid, clause))
        if code is not None:  # a run killed at its limit never finishes its session: no result file
            plugin.pytest_sessionfinish(None, code)
        return code


def run(monkeypatch, tmp_path: Path, *runs, timeout_s=None):
    scripted = ScriptedRuns(*runs)
    monkeypatch.setattr(runner, "_run", scripted)
    options = runner.SuiteOptions("caches.adapters:hiradix", "2", timeout_s=timeout_s)
    return runner.run_suite(options, tmp_path / "w"), scripted.commands


def test_a_later_failure_naming_the_cause_is_the_kill(monkeypatch, tmp_path):
    outcome, commands = run(monkeypatch, tmp_path, (0, []), (1, [(UNNAMED, None)]), (1, [(UNNAMED, None), (NAMING, "S3")]))
    assert outcome.status == runner.KILLED and outcome.test == NAMING and outcome.clauses == ("S3",)
    assert outcome.first_unnamed == UNNAMED and outcome.as_json()["first_failed_naming_no_clause"] == UNNAMED
    assert "-x" in commands[1] and "-x" not in commands[2]  # the naming pass runs past every failure


def test_with_no_failure_naming_a_clause_the_first_kill_stands(monkeypatch, tmp_path):
    outcome, commands = run(monkeypatch, tmp_path, (0, []), (1, [(UNNAMED, None)]), (1, [(UNNAMED, None)]))
    assert outcome.test == UNNAMED and outcome.clauses == () and outcome.first_unnamed is None
    assert len(commands) == 3


def test_a_kill_naming_a_clause_is_not_run_again(monkeypatch, tmp_path):
    outcome, commands = run(monkeypatch, tmp_path, (0, []), (1, [(NAMING, "S3")]))
    assert outcome.test == NAMING and outcome.clauses == ("S3",) and len(commands) == 2


def test_a_naming_pass_past_the_limit_keeps_the_first_kill(monkeypatch, tmp_path):
    outcome, _ = run(monkeypatch, tmp_path, (0, []), (1, [(UNNAMED, None)]), (None, [(NAMING, "S3")]), timeout_s=600)
    assert outcome.status == runner.KILLED and outcome.test == UNNAMED and outcome.first_unnamed is None
