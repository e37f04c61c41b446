"""The conformance matrix: implementation x device x clause, from test reports.

Each conformance test carries its impl, device and clauses (or that it is
weak) in item.user_properties, and a failed one also the clauses its failure
names (conformance/report/failures.py); both travel inside test reports, so the
controller of an xdist run builds the same matrix a single process does.

A clause's status for (impl, device), strongest first:
- fail: a test failed naming this clause (its rule broke here);
- fail-other: a test citing this clause failed, naming another clause (or none);
- xfail: a test citing it failed as expected;
- pass: every citing test that ran passed (at least one ran);
- skip: every citing test skipped;
- not-run: the device did not run at all (no such device here): never a pass;
- uncovered: no test cites it.
A test that takes no device counts for every device of its implementation
that ran. A weak test (@pytest.mark.weak) cites nothing, so it colours no
cell; it is listed with its outcome. Failed tests become defect entries in
conformance/report/defects.py (from the causes conformance/report/causes.py attached to
them). Rendering is in conformance/report/terminal.py (terminal),
conformance/report/markdown.py and html.py; the recorder plugin in conformance/plugin/recorder.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from conformance.report import decision_rows
from conformance.report.causes import INJECTED, read_causes
from conformance.implementations.devices import ANY_DEVICE, CPU
from conformance.report.failures import read_divergent, read_failed
from spec.clauses import CATALOGUE
from spec.divergences import DIVERGENCES
from spec.verdicts import Outcome, verdict

SCHEMA_VERSION = 2  # of the JSON report (conformance/report/schema.json)

PROP_IMPL = "conformance.impl"
PROP_DEVICE = "conformance.device"
PROP_CLAUSES = "conformance.clauses"
PROP_WEAK = "conformance.weak"  # the weak marker's reason
PROP_DEVICE_NOT_RUN = "conformance.device_not_run"  # why the test's device cannot run here
PROP_JUDGED_OUT = "conformance.judged_out"  # "not-judged" or "not-applicable": the test says nothing about this implementation
INTERLEAVINGS_KEY = "conformance.interleavings"  # user property a systematic-exploration test sets

# A clause's outcome per cell, strongest first (spec.verdicts.Outcome); test outcomes are fail, pass, xfail, skip.
STATUSES = tuple(o.value for o in Outcome)
_RAN = STATUSES[:STATUSES.index(Outcome.SKIP.value) + 1]  # up to skip: what a cell shows when some citing test ran or was judged out


def item_properties(impl: str, device: str, clauses: Sequence[str]) -> list[tuple[str, str]]:
    return [(PROP_IMPL, impl), (PROP_DEVICE, device), (PROP_CLAUSES, ",".join(clauses))]


def _properties(user_properties: Iterable[Any]) -> dict[str, Any]:
    """A report's user_properties as a dict (pairs may arrive as lists after xdist's trip)."""
    return {pair[0]: pair[1] for pair in user_properties if len(pair) == 2 and isinstance(pair[0], str)}


def read_properties(user_properties: Iterable[Any]) -> tuple[str, str, list[str]] | None:
    """(impl, device, clauses) from a report's user_properties; None for a test that is not a conformance test."""
    props = _properties(user_properties)
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


ERROR_LINE_CHARS = 300


def error_line(report: Any) -> str:
    """A failed phase's error as one line: the exception and the first line of its message."""
    crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
    text = crash.message if crash is not None else str(getattr(report, "longrepr", "") or "")
    first = text.strip().splitlines()[0] if text.strip() else "(no message)"
    return first if len(first) <= ERROR_LINE_CHARS else first[: ERROR_LINE_CHARS - 3] + "..."


def skip_reason(report: Any) -> str:
    longrepr = getattr(report, "longrepr", None)
    text = str(longrepr[2]) if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr or "")
    return text.removeprefix("Skipped: ")


@dataclass
class OutcomeRecord:
    nodeid: str
    impl: str
    device: str
    clauses: list[str]
    outcome: str | None = None
    # {clause: first message line naming it} of the failing phases; empty: the failure named none
    failed_clauses: dict[str, str] = field(default_factory=dict)
    # {clause: divergence id}: the failed clauses whose every failure is a documented upstream design (spec/divergences.py)
    divergent: dict[str, str] = field(default_factory=dict)
    weak: str | None = None  # the reason of a weak test
    device_not_run: str | None = None  # why its device cannot run here
    skip_reason: str | None = None
    judged_out: str | None = None  # "not-judged" or "not-applicable": skipped as saying nothing about this implementation
    causes: list[dict] = field(default_factory=list)  # of the failing phases (conformance/report/causes.py)
    # as pytest's summary line counts this test: its result, and its setup/teardown errors counted apart
    pytest_outcome: str | None = None
    pytest_errors: int = 0
    phase_errors: list[str] = field(default_factory=list)  # "<setup|teardown>: <the error's first line>", one per error
    unnamed_failure: str | None = None  # the first line of a failing call that named no clause (what kept it from being judged)

    def add(self, report: Any) -> None:
        props = _properties(report.user_properties)
        if PROP_WEAK in props:
            self.weak = str(props[PROP_WEAK])
        if PROP_DEVICE_NOT_RUN in props:
            self.device_not_run = str(props[PROP_DEVICE_NOT_RUN])
        if PROP_JUDGED_OUT in props:
            self.judged_out = str(props[PROP_JUDGED_OUT])
        self._count_as_pytest(report)
        phase = phase_outcome(report)
        if phase == "fail" or (phase is not None and self.outcome is None):
            self.outcome = phase
            if phase == "skip":
                self.skip_reason = skip_reason(report)
        if phase == "fail":
            named = read_failed(report.user_properties) or {}
            divergent = read_divergent(report.user_properties)
            for clause in named:
                # Divergent only while every failing phase naming it was that one divergence.
                first = clause not in self.failed_clauses
                if divergent.get(clause) and (first or self.divergent.get(clause) == divergent[clause]):
                    self.divergent[clause] = divergent[clause]
                else:
                    self.divergent.pop(clause, None)
            for clause, line in named.items():
                self.failed_clauses.setdefault(clause, line)
            if not named and report.when == "call" and self.unnamed_failure is None:
                self.unnamed_failure = error_line(report)
            self.causes += [c for c in read_causes(report.user_properties) or [] if c not in self.causes]

    def _count_as_pytest(self, report: Any) -> None:
        """pytest counts a failing setup or teardown as an error beside the test's own result (a passed call stays passed)."""
        xfail = hasattr(report, "wasxfail")
        if report.when != "call" and report.failed:
            self.pytest_errors += 1
            self.phase_errors.append(f"{report.when}: {error_line(report)}")
        elif report.when == "call" or report.skipped:
            self.pytest_outcome = ("xfail" if report.skipped else "xpass") if xfail else ("skip" if report.skipped else "fail" if report.failed else "pass")

    def as_json(self) -> dict:
        return {"nodeid": self.nodeid, "impl": self.impl, "device": self.device, "clauses": list(self.clauses),
                "pytest_outcome": self.pytest_outcome, "pytest_errors": self.pytest_errors, "phase_errors": list(self.phase_errors),
                "unnamed_failure": self.unnamed_failure if self.outcome == "fail" and not self.failed_clauses else None,
                "outcome": self.outcome, "failed_clauses": dict(self.failed_clauses) if self.outcome == "fail" else None,
                "divergent_clauses": dict(self.divergent) if self.outcome == "fail" else None,
                "causes": list(self.causes) if self.outcome == "fail" else None,
                "weak": self.weak, "skip_reason": self.skip_reason if self.outcome == "skip" else None,
                "judged_out": self.judged_out if self.outcome == "skip" else None}


def clause_status(outcomes: Iterable[str]) -> str:
    """The cell of one clause from the outcomes of the tests citing it: pass only if every one that ran passed."""
    seen = set(outcomes)
    return next((status for status in _RAN if status in seen), "uncovered")


def _clause_outcomes(record: OutcomeRecord) -> Iterable[tuple[str, str]]:
    """(clause, outcome for its cell): a failure counts as 'fail' for what it names, 'fail-other' for what it only cites."""
    if record.outcome == "skip" and record.judged_out == Outcome.NOT_JUDGED.value:
        yield from ((clause, Outcome.NOT_JUDGED.value) for clause in record.clauses)
        return
    if record.outcome != "fail":
        yield from ((clause, record.outcome) for clause in record.clauses)
        return
    yield from ((clause, Outcome.DIVERGE.value if clause in record.divergent else "fail") for clause in record.failed_clauses)
    yield from ((clause, "fail-other") for clause in record.clauses if clause not in record.failed_clauses)


def devices_not_run(records: Sequence[OutcomeRecord], devices: Iterable[str], known: Mapping[str, str] | None = None) -> dict[str, str]:
    """{device: why} for the GPU columns on which no test ran (every test there skipped for want of the device, or none).

    The CPU always runs. A GPU column counts as run only when a test ran on it:
    a run that never reached the GPU says so instead of passing device-free
    tests there. `known`: reasons the harness already has (no GPU visible).
    """
    known = known or {}
    out: dict[str, str] = {}
    for device in dict.fromkeys(devices):
        if device in (CPU, ANY_DEVICE):
            continue
        found = [r for r in records if r.device == device and r.outcome]
        if any(r.device_not_run is None for r in found):
            continue
        reasons = [r.device_not_run for r in found if r.device_not_run]
        out[device] = reasons[0] if reasons else known.get(device, "no test ran on this device in this run")
    return out


def build_matrix(records: Sequence[OutcomeRecord], pairs: Mapping[str, Sequence[str]], clause_ids: Sequence[str],
                 not_run: Mapping[str, str] | None = None) -> tuple[dict, dict]:
    """(matrix[impl][device][clause] -> status, uncovered[impl][device] -> [clause ids])."""
    not_run = not_run or {}
    matrix: dict = {}
    uncovered: dict = {}
    for impl, devices in _columns(records, pairs).items():
        matrix[impl], uncovered[impl] = {}, {}
        for device in devices:
            outcomes: dict[str, list[str]] = {clause: [] for clause in clause_ids}
            for record in _records_of(records, impl, device):
                if record.weak is not None:
                    continue  # cites nothing, whatever its message says
                for clause, outcome in _clause_outcomes(record):
                    outcomes.setdefault(clause, []).append(outcome)
            row = {clause: clause_status(outcomes[clause]) for clause in clause_ids}
            if device in not_run:
                # A device that did not run has no items of its own: what its implementation's tests cite anywhere did not run there.
                cited = {clause for record in records if record.impl == impl and record.weak is None for clause in record.clauses}
                row = {clause: "not-run" if status != "uncovered" or clause in cited else "uncovered" for clause, status in row.items()}
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


def verdict_matrix(outcomes: Mapping[str, Mapping[str, Mapping[str, str]]], profiles: Mapping[str, str]) -> dict:
    """verdicts[impl][device][clause] from the outcomes, each clause's kind and the implementation's declared profile."""
    from spec.profiles import DEFAULT_PROFILE

    return {impl: {device: {clause: verdict(CATALOGUE[clause], profiles.get(impl, DEFAULT_PROFILE), outcome).value
                            for clause, outcome in row.items()}
                   for device, row in devices.items()}
            for impl, devices in outcomes.items()}


def failing_here(records: Sequence[OutcomeRecord], pairs: Mapping[str, Sequence[str]], not_run: Mapping[str, str] | None = None) -> dict:
    """failing[impl][device] -> {clause: the first failure line naming it}, what failed naming no clause, failed weak tests."""
    out: dict = {}
    for impl, devices in _columns(records, pairs).items():
        out[impl] = {}
        for device in devices:
            named: dict[str, str] = {}
            unnamed, weak = [], []
            found = [] if device in (not_run or {}) else _records_of(records, impl, device)
            for record in sorted(found, key=lambda r: r.nodeid):
                if record.outcome != "fail":
                    continue
                if record.weak is not None:
                    weak.append(record.nodeid)
                    continue
                for clause, line in record.failed_clauses.items():
                    named.setdefault(clause, line)
                if not record.failed_clauses:
                    unnamed.append(record.nodeid)
            out[impl][device] = {"clauses": named, "naming_no_clause": unnamed, "weak": weak}
    return out


def skip_groups(records: Sequence[OutcomeRecord]) -> list[dict]:
    """Skipped tests grouped by reason, most frequent first: {reason, count, impls: {impl: count}}."""
    groups: dict[str, dict] = {}
    for record in records:
        if record.outcome != "skip":
            continue
        group = groups.setdefault(record.skip_reason or "", {"reason": record.skip_reason or "", "count": 0, "impls": {}})
        group["count"] += 1
        group["impls"][record.impl] = group["impls"].get(record.impl, 0) + 1
    return sorted(groups.values(), key=lambda g: (-g["count"], g["reason"]))


@dataclass
class ConformanceReport:
    records: list[OutcomeRecord]
    pairs: Mapping[str, Sequence[str]]
    clause_ids: Sequence[str]
    expected_failures: list[dict] = field(default_factory=list)
    stale_expected_failures: list[dict] = field(default_factory=list)
    decision_entries: Mapping[tuple[str, str], list[dict]] = field(default_factory=dict)  # (impl, device) -> table tests
    missing: Sequence[tuple[str, str]] = ()
    device_reasons: Mapping[str, str] = field(default_factory=dict)  # device -> why it cannot run here, as far as known
    declarations: Mapping[str, Any] = field(default_factory=dict)  # impl -> conformance.implementations.declarations.Declarations
    not_collected: Sequence[Mapping[str, Any]] = ()  # items left out for their adapter (Harness.not_collected)

    def as_json(self) -> dict:
        """The results part of the report (the recorder adds suite, run, target, implementations and clauses)."""
        # An item left out for its adapter counts for its clauses as a skip would: not judged (or not applicable), with the reason.
        records = [*self.records, *(left_out_record(entry) for entry in self.not_collected)]
        columns = [device for devices in _columns(records, self.pairs).values() for device in devices]
        not_run = devices_not_run(self.records, columns, self.device_reasons)
        outcomes, uncovered = build_matrix(records, self.pairs, self.clause_ids, not_run)
        profiles = {impl: d.profile.id for impl, d in self.declarations.items()}
        matrix = verdict_matrix(outcomes, profiles)
        decisions: dict = {}
        for impl, devices in matrix.items():
            for device in devices:
                entries = [e for (i, d), found in self.decision_entries.items() if i == impl and d in (device, ANY_DEVICE) for e in found]
                if entries and device not in not_run:
                    decisions.setdefault(impl, {})[device] = decision_rows.summarize(entries)
        return {
            "devices_not_run": [{"device": device, "reason": why} for device, why in sorted(not_run.items())],
            "matrix": matrix,
            "outcomes": outcomes,
            "declarations": {impl: d.as_json() for impl, d in self.declarations.items()},
            "cell_notes": cell_notes(records, matrix, self.declarations),
            "not_collected": [dict(entry) for entry in sorted(self.not_collected, key=lambda e: e["nodeid"])],
            "tests": [r.as_json() for r in sorted(self.records, key=lambda r: r.nodeid) if r.outcome],
            "expected_failures": self.expected_failures,
            "stale_expected_failures": self.stale_expected_failures,
            "uncovered": uncovered,
            "failing": failing_here(self.records, self.pairs, not_run),
            "decision_table": decisions,
            "not_run": [{"impl": name, "reason": why} for name, why in self.missing],
            "skips": skip_groups(self.records),
        }


def left_out_record(entry: Mapping[str, Any]) -> OutcomeRecord:
    """An item not collected for its adapter, as the record a skip of it would have left (it is no test of the run)."""
    return OutcomeRecord(entry["nodeid"], entry["impl"], entry["device"], list(entry["clauses"]), outcome="skip",
                         skip_reason=entry["reason"], judged_out=entry["state"])


def cell_notes(records: Sequence[OutcomeRecord], matrix: Mapping[str, Any], declared: Mapping[str, Any]) -> dict:
    """notes[impl][device][clause] = {kind, why} for every cell a reader needs told why: what failed, why not applicable or not judged."""
    notes: dict = {}
    for impl, devices in matrix.items():
        d = declared.get(impl)
        for device, row in devices.items():
            found = _records_of(records, impl, device)
            for clause, cell in row.items():
                why = _cell_why(clause, cell, found, d)
                if why:
                    notes.setdefault(impl, {}).setdefault(device, {})[clause] = {"kind": CATALOGUE[clause].kind.value, "why": why}
    return notes


def _cell_why(clause: str, cell: str, records: Sequence[OutcomeRecord], declared: Any) -> str | None:
    if cell == "divergence":
        ids = sorted({r.divergent[clause] for r in records if r.outcome == "fail" and clause in r.divergent})
        return "; ".join(f"divergence {i}: {DIVERGENCES[i].title} (upstream's design; the spec differs by intent)" for i in ids) or None
    if cell in ("defect", "hardening"):
        lines = [r.failed_clauses[clause] for r in sorted(records, key=lambda r: r.nodeid) if r.outcome == "fail" and clause in r.failed_clauses]
        # a trigger a deployment produces (a short read) says more than the harness's injected one: first among equals
        return min(lines, key=lambda line: INJECTED in line) if lines else None
    if cell == "not-applicable" and declared is not None:
        c = CATALOGUE[clause]
        return f"{c.kind.value} of {', '.join(c.profiles)}; the implementation declares {declared.profile.id}" + (
            f" ({'; '.join(declared.profile_evidence)})" if declared.profile_evidence else "")
    if cell == "not-judged":
        reasons = sorted({r.skip_reason for r in records if r.outcome == "skip" and clause in r.clauses and r.skip_reason})
        return reasons[0] if reasons else None
    if cell == "unverified":
        others = sorted({named for r in records if r.outcome == "fail" and clause in r.clauses for named in r.failed_clauses} - {clause})
        return f"its failing tests failed first on {', '.join(others)}" if others else "its failing tests named no clause"
    return None
