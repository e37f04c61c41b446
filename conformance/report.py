"""The conformance matrix: implementation x device x clause, from test reports.

Each implementation test carries its impl, device and clauses in
item.user_properties, and a failed one also the clauses its failure names
(conformance/failures.py); both travel inside test reports, so the
controller of an xdist run builds the same matrix a single process does.

A clause's status for (impl, device), strongest first:
- fail: a test failed naming this clause (its rule broke here);
- fail-other: a test citing this clause failed, naming another clause (or none);
- pass, xfail, skip: the tests citing it did so;
- uncovered: no test cites it.
A test that takes no device counts for every device of its implementation.
Rendering (terminal, Markdown) is in conformance/report_render.py.
"""

from __future__ import annotations

import platform
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import pytest

from conformance import decision_rows
from conformance.devices import ANY_DEVICE
from conformance.failures import read_failed
from conformance.report_render import render_terminal, write_report

PROP_IMPL = "conformance.impl"
PROP_DEVICE = "conformance.device"
PROP_CLAUSES = "conformance.clauses"

# Matrix statuses, strongest first; test outcomes are fail, pass, xfail, skip.
STATUSES = ("fail", "fail-other", "pass", "xfail", "skip", "uncovered")


def item_properties(impl: str, device: str, clauses: Sequence[str]) -> list[tuple[str, str]]:
    return [(PROP_IMPL, impl), (PROP_DEVICE, device), (PROP_CLAUSES, ",".join(clauses))]


def read_properties(user_properties: Iterable[Any]) -> tuple[str, str, list[str]] | None:
    """(impl, device, clauses) from a report's user_properties (pairs may arrive as lists)."""
    props = {}
    for pair in user_properties:
        if len(pair) == 2 and isinstance(pair[0], str):
            props[pair[0]] = pair[1]
    if PROP_IMPL not in props:
        return None
    clauses = [c for c in str(props.get(PROP_CLAUSES, "")).split(",") if c]
    return str(props[PROP_IMPL]), str(props.get(PROP_DEVICE, ANY_DEVICE)), clauses


def phase_outcome(report: Any) -> str | None:
    """What one setup/call/teardown report says about its test (None: nothing)."""
    if report.failed:
        return "fail"  # includes XPASS(strict) and errors in setup or teardown
    if report.skipped:
        return "xfail" if hasattr(report, "wasxfail") else "skip"
    if report.when == "call":
        return "pass"  # a non-strict XPASS passes too
    return None


@dataclass
class OutcomeRecord:
    nodeid: str
    impl: str
    device: str
    clauses: list[str]
    outcome: str | None = None
    # {clause: first message line naming it} of the failing phases; empty: the failure named none
    failed_clauses: dict[str, str] = field(default_factory=dict)

    def add(self, report: Any) -> None:
        phase = phase_outcome(report)
        if phase == "fail" or (phase is not None and self.outcome is None):
            self.outcome = phase
        if phase == "fail":
            for clause, line in (read_failed(report.user_properties) or {}).items():
                self.failed_clauses.setdefault(clause, line)

    def as_json(self) -> dict:
        return {"nodeid": self.nodeid, "impl": self.impl, "device": self.device, "clauses": list(self.clauses),
                "outcome": self.outcome, "failed_clauses": dict(self.failed_clauses) if self.outcome == "fail" else None}


def clause_status(outcomes: Iterable[str]) -> str:
    seen = set(outcomes)
    return next((status for status in STATUSES[:-1] if status in seen), "uncovered")


def _clause_outcomes(record: OutcomeRecord) -> Iterable[tuple[str, str]]:
    """(clause, outcome for its cell): a failure counts as 'fail' for what it names, 'fail-other' for what it only cites."""
    if record.outcome != "fail":
        yield from ((clause, record.outcome) for clause in record.clauses)
        return
    yield from ((clause, "fail") for clause in record.failed_clauses)
    yield from ((clause, "fail-other") for clause in record.clauses if clause not in record.failed_clauses)


def build_matrix(records: Sequence[OutcomeRecord], pairs: Mapping[str, Sequence[str]], clause_ids: Sequence[str]) -> tuple[dict, dict]:
    """(matrix[impl][device][clause] -> status, uncovered[impl][device] -> [clause ids])."""
    matrix: dict = {}
    uncovered: dict = {}
    for impl, devices in _columns(records, pairs).items():
        matrix[impl], uncovered[impl] = {}, {}
        for device in devices:
            outcomes: dict[str, list[str]] = {clause: [] for clause in clause_ids}
            for record in _records_of(records, impl, device):
                for clause, outcome in _clause_outcomes(record):
                    outcomes.setdefault(clause, []).append(outcome)
            row = {clause: clause_status(outcomes[clause]) for clause in clause_ids}
            matrix[impl][device] = row
            uncovered[impl][device] = [clause for clause in clause_ids if row[clause] == "uncovered"]
    return matrix, uncovered


def _columns(records: Sequence[OutcomeRecord], pairs: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    columns: dict[str, list[str]] = {impl: list(devices) for impl, devices in pairs.items()}
    for record in records:
        devices = columns.setdefault(record.impl, [])
        if record.device != ANY_DEVICE and record.device not in devices:
            devices.append(record.device)
    return columns


def _records_of(records: Sequence[OutcomeRecord], impl: str, device: str) -> list[OutcomeRecord]:
    return [r for r in records if r.impl == impl and r.outcome and r.device in (device, ANY_DEVICE)]


def failing_here(records: Sequence[OutcomeRecord], pairs: Mapping[str, Sequence[str]]) -> dict:
    """failing[impl][device] -> {clause: the first failure line naming it}, and what failed naming no clause."""
    out: dict = {}
    for impl, devices in _columns(records, pairs).items():
        out[impl] = {}
        for device in devices:
            named: dict[str, str] = {}
            unnamed = []
            for record in sorted(_records_of(records, impl, device), key=lambda r: r.nodeid):
                if record.outcome != "fail":
                    continue
                for clause, line in record.failed_clauses.items():
                    named.setdefault(clause, line)
                if not record.failed_clauses:
                    unnamed.append(record.nodeid)
            out[impl][device] = {"clauses": named, "naming_no_clause": unnamed}
    return out


def suite_commit() -> str | None:
    """HEAD of the repository holding this suite, or None (not a checkout, no git)."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent,
                             capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out or None


def describe_target(devices: Sequence[Mapping[str, Any]]) -> dict:
    import torch

    return {
        "device_kinds": sorted({d["kind"] for d in devices}),
        "devices": [dict(d) for d in devices],
        "torch": torch.__version__,
        "python": platform.python_version(),
        "suite_commit": suite_commit(),
        "platform": platform.platform(),
    }


@dataclass
class ConformanceReport:
    target: dict
    records: list[OutcomeRecord]
    pairs: Mapping[str, Sequence[str]]
    clause_ids: Sequence[str]
    expected_failures: list[dict] = field(default_factory=list)
    stale_expected_failures: list[dict] = field(default_factory=list)
    decision_entries: Mapping[tuple[str, str], list[dict]] = field(default_factory=dict)  # (impl, device) -> table tests
    missing: Sequence[tuple[str, str]] = ()

    def as_json(self) -> dict:
        matrix, uncovered = build_matrix(self.records, self.pairs, self.clause_ids)
        decisions: dict = {}
        for impl, devices in matrix.items():
            for device in devices:
                entries = [e for (i, d), found in self.decision_entries.items() if i == impl and d in (device, ANY_DEVICE) for e in found]
                if entries:
                    decisions.setdefault(impl, {})[device] = decision_rows.summarize(entries)
        return {
            "target": self.target,
            "matrix": matrix,
            "tests": [r.as_json() for r in sorted(self.records, key=lambda r: r.nodeid) if r.outcome],
            "expected_failures": self.expected_failures,
            "stale_expected_failures": self.stale_expected_failures,
            "uncovered": uncovered,
            "failing": failing_here(self.records, self.pairs),
            "decision_table": decisions,
            "not_run": [{"impl": name, "reason": why} for name, why in self.missing],
        }


MATCHED_KEY = "conformance_matched_expected_failures"  # xdist workeroutput key
INTERLEAVINGS_KEY = "conformance.interleavings"  # user property a systematic-exploration test sets


class MatrixRecorder:
    """Plugin for the process that sees every report (the xdist controller, or the only process)."""

    def __init__(self, *, adapter_names: Sequence[str], device_ids: Any, expectations: Any,
                 clause_titles: Mapping[str, str], report_path: str | None, missing: Sequence[tuple[str, str]] = ()) -> None:
        self.adapter_names = list(adapter_names)
        self.missing = list(missing)  # (implementation, why it was not run)
        self.device_ids = device_ids  # called once at the end: device columns of this run
        self.expectations = expectations
        self.clause_titles = dict(clause_titles)
        self.report_path = report_path
        self.records: dict[str, OutcomeRecord] = {}
        self.interleavings: dict[str, int] = {}  # impl -> schedules explored (test_exploration)
        self.decision_entries: dict[tuple[str, str], list[dict]] = {}  # (impl, device) -> decision-table tests
        self.worker_matched: set[str] = set()
        self.data: dict | None = None
        self.written: tuple[Path, Path] | None = None

    def pytest_runtest_logreport(self, report: Any) -> None:
        props = read_properties(report.user_properties)
        if props is None:
            return
        record = self.records.get(report.nodeid)
        if record is None:
            impl, device, clauses = props
            record = self.records[report.nodeid] = OutcomeRecord(report.nodeid, impl, device, clauses)
        record.add(report)
        if report.when == "call":
            for pair in report.user_properties:
                if pair[0] == INTERLEAVINGS_KEY:
                    self.interleavings[record.impl] = self.interleavings.get(record.impl, 0) + int(pair[1])
            table = decision_rows.read_rows(report.user_properties)
            if table is not None:
                self.decision_entries.setdefault((record.impl, record.device), []).append(table)

    @pytest.hookimpl(optionalhook=True)  # an xdist hook: absent without xdist
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        self.worker_matched.update(getattr(node, "workeroutput", {}).get(MATCHED_KEY, ()))

    def pytest_sessionfinish(self, session: Any) -> None:
        if not self.records and not self.missing:
            return
        from conformance.devices import describe_devices

        devices = list(self.device_ids())
        rows, stale = self.expectations.report(self.expectations.matched | self.worker_matched)
        report = ConformanceReport(
            target=describe_target(describe_devices()),
            records=list(self.records.values()),
            pairs={name: devices for name in self.adapter_names},
            clause_ids=list(self.clause_titles),
            expected_failures=rows,
            stale_expected_failures=stale,
            decision_entries=self.decision_entries,
            missing=self.missing,
        )
        self.data = report.as_json()
        self.data["interleavings"] = dict(sorted(self.interleavings.items()))
        if self.report_path:
            self.written = write_report(self.data, self.report_path, self.clause_titles)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.data is None:
            return
        tr = terminalreporter
        tr.write_sep("=", "conformance matrix (implementation x device x clause)")
        for line in render_terminal(self.data):
            tr.write_line(line)
        if self.data["interleavings"]:
            explored = ", ".join(f"{impl} {count}" for impl, count in self.data["interleavings"].items())
            tr.write_line(f"interleavings explored: {explored}")
        stale = self.data["stale_expected_failures"]
        if stale:
            tr.write_sep("-", f"{len(stale)} stale expected failure(s): they match no collected test", yellow=True)
            for entry in stale:
                tr.write_line(f"WARNING stale expected failure: {entry['impl']}: {entry['test']} ({entry['reason']})", yellow=True)
        if self.written:
            tr.write_line(f"conformance report written: {self.written[0]} and {self.written[1]}")
