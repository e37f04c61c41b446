"""A pytest plugin for a campaign's runs: writes which failing test the suite orders first and which clauses its failure names.

Loaded with `-p conformance.mutants.first_failure`; active only where
HICACHE_MUTANT_RESULT names the JSON file to write, and only in the process
that sees every report (the xdist controller, or the only process), in the
order reports arrive. The clauses are read as conformance/report/failures.py reads
them for the matrix: from the report's user properties.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from conformance.report.failures import read_failed
from conformance.mutants.importhook import take_precedence

take_precedence()  # pytest's assertion rewriter went in front of the mutant's finder at start-up: this runs before any cache is imported

RESULT_ENV = "HICACHE_MUTANT_RESULT"
_MESSAGE_CHARS = 240


class FirstFailure:
    """Keeps every failure until the run stops, then the one earliest in the suite's order.

    The suite runs causes before consequences (the decision table before the
    scenarios that depend on the vote). Under xdist the failure that reaches
    the controller first is whichever worker was quicker; of those that came
    in before `-x` stopped the run, the one the suite orders first is the
    one that names the rule broken, and the same one from run to run.
    """

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self.order: dict[str, int] = {}
        self.failures: list[dict[str, Any]] = []
        self.counts: dict[str, int] = {}

    def _failed(self, report: Any, what: str) -> None:
        named = read_failed(getattr(report, "user_properties", ())) or {}
        self.failures.append({"nodeid": report.nodeid or "(collection)", "when": what, "clauses": list(named),
                              "message": next(iter(named.values()), None) or _error_line(report)})

    def _ordered(self, ids: Any) -> None:
        if not self.order:
            self.order = {nodeid: index for index, nodeid in enumerate(ids)}

    def pytest_collection_finish(self, session: Any) -> None:
        self._ordered(item.nodeid for item in getattr(session, "items", ()))

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: Any) -> None:
        self._ordered(ids)

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            self._failed(report, "collect")

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.failed:
            self._failed(report, report.when)
        if report.when == "call" or report.failed or report.skipped:
            outcome = "failed" if report.failed else "skipped" if report.skipped else "passed"
            self.counts[outcome] = self.counts.get(outcome, 0) + 1

    def first(self) -> dict[str, Any] | None:
        """The failure earliest in collection order (one not in it, a collection error say, before every test)."""
        return self._earliest(lambda f: True)

    def first_naming(self) -> dict[str, Any] | None:
        """The failure earliest in collection order among those that name a clause."""
        return self._earliest(lambda f: bool(f["clauses"]))

    def _earliest(self, keep: Any) -> dict[str, Any] | None:
        ranked = [(self.order.get(f["nodeid"], -1), arrival, f) for arrival, f in enumerate(self.failures) if keep(f)]
        return min(ranked, key=lambda r: r[:2])[2] if ranked else None

    def pytest_sessionfinish(self, session: Any, exitstatus: Any) -> None:
        self.path.write_text(json.dumps({"first_failure": self.first(), "first_naming_failure": self.first_naming(),
                                         "failures": len(self.failures), "counts": self.counts,
                                         "exitstatus": int(exitstatus)}), encoding="utf-8")


def _error_line(report: Any) -> str:
    """The exception line of a failure that names no clause ("E   ..." in pytest's text), bounded."""
    text = getattr(report, "longreprtext", "") or ""
    errors = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
    line = errors[0] if errors else (text.strip().splitlines() or [""])[-1]
    return line if len(line) <= _MESSAGE_CHARS else line[: _MESSAGE_CHARS - 3] + "..."


def pytest_configure(config: pytest.Config) -> None:
    path = os.environ.get(RESULT_ENV)
    if path and not hasattr(config, "workerinput"):
        config.pluginmanager.register(FirstFailure(path), "mutants-first-failure")
