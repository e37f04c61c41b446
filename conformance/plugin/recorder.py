"""The plugin object of the process that sees every test report: it builds, writes and prints the report.

Registered by conformance/plugin/__init__.py in the xdist controller (or the only
process) of a session that runs the suite. It collects one OutcomeRecord per
conformance test, the exploration counts and the decision-table rows, and at
the end of the session assembles the report (conformance/report/matrix.py for the
matrix, conformance/plugin/identity.py for what was tested where), writes PATH.json,
PATH.md and PATH.html with --conformance-report PATH, and prints the matrix.
A run that stopped early (Ctrl-C, -x, --maxfail, collection errors) says so in
`run.interrupted`: its verdicts cover only the tests that ran.
"""

from __future__ import annotations

import importlib
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from conformance.report import decision_rows
from conformance.report.defects import defects_of
from conformance.plugin.harness import MATCHED_KEY, NOT_COLLECTED_KEY
from conformance.report.matrix import INTERLEAVINGS_KEY, SCHEMA_VERSION, ConformanceReport, OutcomeRecord, read_properties
from conformance.report.files import write_report
from conformance.report.terminal import render_terminal

RECORDER_NAME = "conformance-matrix"


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, timezone.utc).isoformat(timespec="seconds")


def clause_texts() -> dict:
    """Every clause of the catalogue, as the report carries it (the HTML page links failing cells to these)."""
    from spec.clauses import CATALOGUE, GROUPS

    return {cid: {"title": c.title, "group": GROUPS[c.group], "kind": c.kind.value, "profiles": list(c.profiles),
                  "statement": c.statement, "rationale": c.rationale,
                  "stance": c.stance.value, "upstream": c.upstream, "evidence": list(c.evidence)}
            for cid, c in CATALOGUE.items()}


def interruption_reason(error: BaseException) -> str:
    """What stopped the run, in pytest's words: 'stopping after 1 failures', '2 errors during collection', or Ctrl-C."""
    if type(error) is KeyboardInterrupt:  # pytest's own early stops subclass it, with a message
        return "KeyboardInterrupt (Ctrl-C)"
    return " ".join(str(error).split()) or type(error).__name__


class MatrixRecorder:
    def __init__(self, harness: Any, config: pytest.Config | None = None, *, report_path: str | None = None,
                 repro_dir: str | None = None, started: float | None = None) -> None:
        self.harness = harness
        self.config = config
        self.report_path = report_path if config is None else config.getoption("--conformance-report")
        self.repro_dir = repro_dir if config is None else config.getoption("--conformance-repro")
        self.repros: list[Path] = []
        self.started = time.time() if started is None else started
        self.records: dict[str, OutcomeRecord] = {}
        self.interleavings: dict[str, int] = {}  # impl -> schedules explored (test_exploration)
        self.decision_entries: dict[tuple[str, str], list[dict]] = {}  # (impl, device) -> decision-table tests
        self.worker_matched: set[str] = set()
        self.worker_not_collected: dict[str, dict] = {}  # nodeid -> what a worker left out (every worker collects the same)
        self.data: dict | None = None
        self.written: tuple[Path, ...] = ()
        self._warming = False
        self.interrupted: str | None = None  # why the run stopped early; None: it ran to its end

    def pytest_keyboard_interrupt(self, excinfo: Any) -> None:
        self.interrupted = interruption_reason(excinfo.value)

    def pytest_internalerror(self, excrepr: Any, excinfo: Any) -> None:
        # pytest itself broke (a hook raised, its output pipe closed): the run ends where it was, as an interrupt does
        if self.interrupted is None:
            self.interrupted = f"pytest internal error: {interruption_reason(excinfo.value)}"

    def pytest_runtest_logreport(self, report: Any) -> None:
        if self.config is not None and "torch" not in sys.modules and not self._warming:
            # The xdist controller never needs torch until the report names the machine's devices:
            # imported now, while the workers run tests, not after the last one.
            self._warming = True
            threading.Thread(target=importlib.import_module, args=("torch",), name="conformance-import-torch", daemon=True).start()
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
        output = getattr(node, "workeroutput", {})
        self.worker_matched.update(output.get(MATCHED_KEY, ()))
        self.worker_not_collected.update({entry["nodeid"]: entry for entry in output.get(NOT_COLLECTED_KEY, ())})

    def _device_reasons(self) -> dict[str, str]:
        """Why GPU columns cannot run, as this process knows it (it sees what its xdist workers pin from)."""
        from conformance.implementations import devices

        if devices.visible_gpu_count() == 0:
            reason = devices.no_gpu_reason()
            return {device: reason for device in self.harness.device_ids() if device != devices.CPU}
        return {}

    def build(self) -> dict:
        from conformance.implementations.devices import describe_devices
        from conformance.plugin.identity import describe_target, implementation_identity, suite_identity

        harness = self.harness
        devices = list(harness.device_ids())
        clauses = clause_texts()
        rows, stale = harness.expectations.report(harness.expectations.matched | self.worker_matched)
        # An implementation none of whose tests was selected (-k, -m, deselection) did not run: it is said so, not shown uncovered.
        left_out = list(self.worker_not_collected.values()) or list(harness.not_collected)
        selected = {record.impl for record in self.records.values()} | {entry["impl"] for entry in left_out}
        deselected = [(a.name, "no test of it was selected in this run") for a in harness.adapters if a.name not in selected]
        results = ConformanceReport(
            records=list(self.records.values()),
            not_collected=left_out,
            pairs={adapter.name: devices for adapter in harness.adapters if adapter.name in selected},
            clause_ids=list(clauses),
            expected_failures=rows,
            stale_expected_failures=stale,
            decision_entries=self.decision_entries,
            missing=[*harness.missing, *deselected],
            device_reasons=self._device_reasons(),
            declarations=harness.declared,
        ).as_json()
        finished = time.time()
        invocation = self.config.invocation_params if self.config is not None else None
        implementations = [implementation_identity(a, o) for a, o in zip(harness.adapters, harness.origins)]
        return {
            "schema_version": SCHEMA_VERSION,
            "suite": suite_identity(),
            "run": {"started": _iso(self.started), "finished": _iso(finished), "duration_s": round(finished - self.started, 3),
                    "pytest_args": list(invocation.args) if invocation else [],
                    "directory": str(invocation.dir) if invocation else None,
                    "xdist_workers": self._workers(), "interrupted": self.interrupted},
            "target": describe_target(describe_devices()),
            "implementations": implementations,
            "defects": defects_of({"tests": results["tests"], "implementations": implementations,
                                   "declarations": results.get("declarations")}),
            **results,
            "interleavings": dict(sorted(self.interleavings.items())),
            "clauses": clauses,
        }

    def _workers(self) -> int | None:
        if self.config is None or self.config.getoption("dist", "no") == "no":
            return None
        count = self.config.getoption("numprocesses", None)
        return count if isinstance(count, int) else None

    def pytest_sessionfinish(self, session: Any, exitstatus: Any) -> None:
        if self.interrupted is None and exitstatus in (pytest.ExitCode.INTERRUPTED, pytest.ExitCode.INTERNAL_ERROR):
            self.interrupted = "interrupted" if exitstatus == pytest.ExitCode.INTERRUPTED else "pytest internal error"
        if not self.records and not self.harness.missing:
            return
        self.data = self.build()
        if self.repro_dir:
            from conformance.repro.writer import write_repros

            self.repros = write_repros(self.data, self.repro_dir, {a.name: a for a in self.harness.adapters})
        if self.report_path:
            self.written = write_report(self.data, self.report_path)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.data is None:
            return
        tr = terminalreporter
        tr.write_sep("=", "conformance matrix (implementation x device x clause)")
        writer = self.config.get_terminal_writer() if self.config is not None else None
        for line in render_terminal(self.data, colour=writer.markup if writer is not None else None):
            tr.write_line(line)
        stale = self.data["stale_expected_failures"]
        if stale:
            tr.write_sep("-", f"{len(stale)} stale expected failure(s): they match no collected test", yellow=True)
            for entry in stale:
                tr.write_line(f"WARNING stale expected failure: {entry['impl']}: {entry['test']} ({entry['reason']})", yellow=True)
        if self.repros:
            tr.write_line(f"reproduction scripts written: {len(self.repros)} in {self.repro_dir}")
        if self.written:
            tr.write_line("conformance report written: " + ", ".join(str(p) for p in self.written))
