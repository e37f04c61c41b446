"""A pytest plugin for a campaign's runs: writes which test failed first and which clauses its failure names.

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
    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self.first: dict[str, Any] | None = None
        self.counts: dict[str, int] = {}

    def _failed(self, report: Any, what: str) -> None:
        if self.first is not None:
            return
        named = read_failed(getattr(report, "user_properties", ())) or {}
        self.first = {"nodeid": report.nodeid or "(collection)", "when": what, "clauses": list(named),
                      "message": next(iter(named.values()), None) or _error_line(report)}

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            self._failed(report, "collect")

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.failed:
            self._failed(report, report.when)
        if report.when == "call" or report.failed or report.skipped:
            outcome = "failed" if report.failed else "skipped" if report.skipped else "passed"
            self.counts[outcome] = self.counts.get(outcome, 0) + 1

    def pytest_sessionfinish(self, session: Any, exitstatus: Any) -> None:
        self.path.write_text(json.dumps({"first_failure": self.first, "counts": self.counts, "exitstatus": int(exitstatus)}),
                             encoding="utf-8")


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
