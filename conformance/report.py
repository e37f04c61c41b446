"""The conformance matrix: implementation x device x clause, from test reports.

Each implementation test carries its impl, device and clauses in
item.user_properties, which travel inside test reports, so the controller of an
xdist run builds the same matrix a single process does. A clause's status for
(impl, device): fail if any test citing it failed, else pass if any passed,
else xfail, else skip, else uncovered. A test that takes no device counts for
every device of its implementation.
"""

from __future__ import annotations

import json
import platform
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import pytest

from conformance.devices import ANY_DEVICE

PROP_IMPL = "conformance.impl"
PROP_DEVICE = "conformance.device"
PROP_CLAUSES = "conformance.clauses"

# Matrix statuses, strongest first; test outcomes use the first four.
STATUSES = ("fail", "pass", "xfail", "skip", "uncovered")


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

    def add(self, report: Any) -> None:
        phase = phase_outcome(report)
        if phase == "fail" or (phase is not None and self.outcome is None):
            self.outcome = phase

    def as_json(self) -> dict:
        return {"nodeid": self.nodeid, "impl": self.impl, "device": self.device, "clauses": list(self.clauses), "outcome": self.outcome}


def clause_status(outcomes: Iterable[str]) -> str:
    seen = set(outcomes)
    return next((status for status in STATUSES[:-1] if status in seen), "uncovered")


def build_matrix(records: Sequence[OutcomeRecord], pairs: Mapping[str, Sequence[str]], clause_ids: Sequence[str]) -> tuple[dict, dict]:
    """(matrix[impl][device][clause] -> status, uncovered[impl][device] -> [clause ids])."""
    columns: dict[str, list[str]] = {impl: list(devices) for impl, devices in pairs.items()}
    for record in records:
        devices = columns.setdefault(record.impl, [])
        if record.device != ANY_DEVICE and record.device not in devices:
            devices.append(record.device)
    matrix: dict = {}
    uncovered: dict = {}
    for impl, devices in columns.items():
        matrix[impl], uncovered[impl] = {}, {}
        for device in devices:
            outcomes: dict[str, list[str]] = {clause: [] for clause in clause_ids}
            for record in records:
                if record.impl == impl and record.outcome and record.device in (device, ANY_DEVICE):
                    for clause in record.clauses:
                        outcomes.setdefault(clause, []).append(record.outcome)
            row = {clause: clause_status(outcomes[clause]) for clause in clause_ids}
            matrix[impl][device] = row
            uncovered[impl][device] = [clause for clause in clause_ids if row[clause] == "uncovered"]
    return matrix, uncovered


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

    def as_json(self) -> dict:
        matrix, uncovered = build_matrix(self.records, self.pairs, self.clause_ids)
        return {
            "target": self.target,
            "matrix": matrix,
            "tests": [r.as_json() for r in sorted(self.records, key=lambda r: r.nodeid) if r.outcome],
            "expected_failures": self.expected_failures,
            "stale_expected_failures": self.stale_expected_failures,
            "uncovered": uncovered,
        }


def _columns(matrix: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, str]]:
    return [(impl, device) for impl, devices in matrix.items() for device in devices]


def _counts(row: Mapping[str, str]) -> str:
    return ", ".join(f"{sum(1 for s in row.values() if s == status)} {status}" for status in STATUSES)


_LETTERS = {"pass": "P", "fail": "F", "xfail": "x", "skip": "s", "uncovered": "."}


def render_terminal(data: Mapping[str, Any]) -> list[str]:
    """One row per impl/device, one column per clause (stays narrow as GPUs add rows), then counts."""
    matrix = data["matrix"]
    columns = _columns(matrix)
    if not columns:
        return ["(no implementation under test)"]
    clause_ids = list(next(iter(matrix[columns[0][0]].values())).keys())
    labels = [f"{impl}/{device}" for impl, device in columns]
    width = max(len(label) for label in labels)
    cell = max(len(c) for c in clause_ids) + 1
    lines = ["legend: " + "  ".join(f"{letter} {status}" for status, letter in _LETTERS.items()),
             " " * (width + 2) + "".join(c.ljust(cell) for c in clause_ids).rstrip()]
    for label, (impl, device) in zip(labels, columns):
        row = matrix[impl][device]
        lines.append(label.ljust(width + 2) + "".join(_LETTERS[row[c]].ljust(cell) for c in clause_ids).rstrip())
    for label, (impl, device) in zip(labels, columns):
        row = matrix[impl][device]
        failing = [c for c in clause_ids if row[c] == "fail"]
        lines.append(f"{label}: {_counts(row)}" + (f"; failing: {', '.join(failing)}" if failing else ""))
    return lines


def render_markdown(data: Mapping[str, Any], titles: Mapping[str, str] | None = None) -> str:
    titles = titles or {}
    target = data["target"]
    out = ["# Conformance report", "", "## Target", ""]
    out += [f"- torch {target['torch']}, Python {target['python']}, platform {target['platform']}",
            f"- suite commit: {target['suite_commit'] or 'unknown'}",
            f"- device kinds: {', '.join(target['device_kinds'])}", "",
            "| device | kind | model | driver |", "|---|---|---|---|"]
    out += [f"| {d['name']} | {d['kind']} | {d['model']} | {d['driver'] or '-'} |" for d in target["devices"]]
    out += ["", "## Matrix", ""]
    for impl, devices in data["matrix"].items():
        names = list(devices)
        out += [f"### {impl}", "", "| clause | title | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
        clause_ids = list(devices[names[0]]) if names else []
        for clause in clause_ids:
            out.append(f"| {clause} | {titles.get(clause, '')} | " + " | ".join(devices[d][clause] for d in names) + " |")
        out.append("")
    out += ["## Expected failures", ""]
    if data["expected_failures"]:
        out += ["| impl | test | reason | matched |", "|---|---|---|---|"]
        out += [f"| {e['impl']} | `{e['test']}` | {e['reason']} | {'yes' if e['matched'] else 'STALE'} |" for e in data["expected_failures"]]
    else:
        out.append("None.")
    out += ["", "## Uncovered clauses", ""]
    for impl, devices in data["uncovered"].items():
        for device, clauses in devices.items():
            out.append(f"- {impl} / {device}: {', '.join(clauses) if clauses else 'none'}")
    counts: dict[str, int] = {}
    for test in data["tests"]:
        counts[test["outcome"]] = counts.get(test["outcome"], 0) + 1
    out += ["", "## Tests", "", ", ".join(f"{n} {o}" for o, n in sorted(counts.items())) or "none ran", ""]
    return "\n".join(out)


def write_report(data: Mapping[str, Any], path: str | Path, titles: Mapping[str, str] | None = None) -> tuple[Path, Path]:
    """PATH.json and PATH.md (parent folders created)."""
    base = Path(path)
    base.parent.mkdir(parents=True, exist_ok=True)
    json_path = base.with_name(base.name + ".json")
    md_path = base.with_name(base.name + ".md")
    json_path.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    md_path.write_text(render_markdown(data, titles), encoding="utf-8")
    return json_path, md_path


MATCHED_KEY = "conformance_matched_expected_failures"  # xdist workeroutput key
INTERLEAVINGS_KEY = "conformance.interleavings"  # user property a systematic-exploration test sets


class MatrixRecorder:
    """Plugin for the process that sees every report (the xdist controller, or the only process)."""

    def __init__(self, *, adapter_names: Sequence[str], device_ids: Any, expectations: Any,
                 clause_titles: Mapping[str, str], report_path: str | None) -> None:
        self.adapter_names = list(adapter_names)
        self.device_ids = device_ids  # called once at the end: device columns of this run
        self.expectations = expectations
        self.clause_titles = dict(clause_titles)
        self.report_path = report_path
        self.records: dict[str, OutcomeRecord] = {}
        self.interleavings: dict[str, int] = {}  # impl -> schedules explored (test_exploration)
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

    @pytest.hookimpl(optionalhook=True)  # an xdist hook: absent without xdist
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        self.worker_matched.update(getattr(node, "workeroutput", {}).get(MATCHED_KEY, ()))

    def pytest_sessionfinish(self, session: Any) -> None:
        if not self.records:
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
