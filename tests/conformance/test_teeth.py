"""The harness has teeth: each known-bad variant (caches/variants) fails the
conformance suite naming the clauses it breaks, while the real hiradix passes
the very same tests in the very same run, so the failures come from the
variants, not the harness.

Each run is a real `python -m pytest conformance ...` subprocess over several
adapters (--cache-impl, repeated); the runs go in parallel. The failure text
of each variant must name its clauses ("D3: ..."); when the run wrote the
--conformance-report JSON, its matrix must also mark them "fail".
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from caches.variants import EXPECTED_FAILURES

pytestmark = pytest.mark.slow  # real suite runs in subprocesses

REPO = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 300
BASELINE = "hiradix"
BASELINE_SPEC = "caches.adapters:hiradix"

# -k selection -> the variants it must catch; the baseline runs in each.
RUNS = {
    "test_decision": ("guard_missing", "guard_on_vote", "guard_after_reduce"),
    "test_windows": ("upstream_windows",),
}
SECTION = re.compile(r"^_{2,} (?:ERROR at \w+ of )?(\S+?) _{2,}$", re.MULTILINE)
SUMMARY = re.compile(r"^(FAILED|ERROR|PASSED) (\S+)", re.MULTILINE)


@dataclass
class Run:
    selection: str
    impls: tuple[str, ...]
    returncode: int
    output: str
    report: dict | None

    def impl_of(self, test_id: str) -> str | None:
        params = test_id.partition("[")[2]
        return next((impl for impl in self.impls if params.startswith(impl + "-") or params == impl + "]"), None)

    def failure_text(self, impl: str) -> str:
        """The failure sections (tracebacks and messages) of impl's tests."""
        headers = list(SECTION.finditer(self.output))
        parts = []
        for index, header in enumerate(headers):
            end = headers[index + 1].start() if index + 1 < len(headers) else len(self.output)
            if self.impl_of(header.group(1)) == impl:
                parts.append(self.output[header.start():end])
        return "".join(parts)

    def tests(self, impl: str, outcomes: tuple[str, ...] = ("FAILED", "ERROR")) -> list[str]:
        return [m.group(2) for m in SUMMARY.finditer(self.output) if m.group(1) in outcomes and self.impl_of(m.group(2)) == impl]

    def clause_status(self, impl: str, clause: str) -> str | None:
        return self.report["matrix"].get(impl, {}).get("cpu", {}).get(clause) if self.report else None

    def describe(self) -> str:
        return f"run -k {self.selection} over {', '.join(self.impls)}: exit {self.returncode}\n{self.output[-5000:]}"


def start(selection: str, impls: tuple[str, ...], report: Path) -> subprocess.Popen:
    specs = [BASELINE_SPEC if impl == BASELINE else f"caches.variants:{impl}" for impl in impls]
    command = [sys.executable, "-m", "pytest", "conformance", "-p", "no:cacheprovider", "-q", "-n", "0",
               "--tb=short", "-rfEp", "-k", selection, "--conformance-report", str(report)]
    for spec in specs:
        command += ["--cache-impl", spec]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # GPU params skip on any machine
    return subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Run]:
    """Every selection's run, by impl (the baseline's entry is a list of runs)."""
    out = tmp_path_factory.mktemp("teeth")
    started = []
    for selection, variants in RUNS.items():
        impls = (*variants, BASELINE)
        report = out / selection
        started.append((selection, impls, report, start(selection, impls, report)))
    done: list[Run] = []
    try:
        for selection, impls, report, process in started:
            try:
                output, _ = process.communicate(timeout=RUN_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                output, _ = process.communicate()
                raise AssertionError(f"the conformance run -k {selection} did not finish within {RUN_TIMEOUT_S}s:\n{output[-5000:]}")
            json_path = report.with_name(report.name + ".json")
            data = json.loads(json_path.read_text()) if json_path.exists() else None
            done.append(Run(selection, impls, process.returncode, output, data))
    finally:
        for *_, process in started:
            if process.poll() is None:
                process.kill()
                process.communicate()
    return {run.selection: run for run in done}


def named(text: str, clause: str) -> bool:
    # Violations and the tests' assertion messages read "<clause>: ...".
    return re.search(rf"(?<![A-Za-z0-9]){re.escape(clause)}: ", text) is not None


VARIANT_RUNS = [(variant, selection) for selection, variants in RUNS.items() for variant in variants]


def test_every_variant_is_exercised():
    assert sorted(v for v, _ in VARIANT_RUNS) == sorted(EXPECTED_FAILURES), "every variant in caches.variants needs a run here"


@pytest.mark.parametrize("variant, selection", VARIANT_RUNS, ids=[v for v, _ in VARIANT_RUNS])
def test_variant_fails_naming_its_clauses(runs, variant, selection):
    run = runs[selection]
    assert run.returncode == 1, f"the run must end with test failures (exit 1)\n{run.describe()}"
    assert run.tests(variant), f"no test failed for {variant}\n{run.describe()}"
    text = run.failure_text(variant)
    for clause in EXPECTED_FAILURES[variant]:
        assert named(text, clause), f"{variant}: no failure names clause {clause}\n{run.describe()}"
        if run.report is not None:
            status = run.clause_status(variant, clause)
            assert status == "fail", f"{variant}: the report's matrix marks {clause} as {status!r} on cpu, not 'fail'"


@pytest.mark.parametrize("selection", sorted(RUNS))
def test_hiradix_passes_what_the_variants_fail(runs, selection):
    run = runs[selection]
    assert not run.tests(BASELINE), f"the real hiradix failed {run.tests(BASELINE)}\n{run.describe()}"
    assert run.tests(BASELINE, ("PASSED",)), f"no test passed for hiradix\n{run.describe()}"
    if run.report is not None:
        cells = run.report["matrix"].get(BASELINE, {}).get("cpu", {})
        assert "pass" in cells.values(), f"hiradix passed no clause in -k {selection}"
        failing = sorted(c for c, status in cells.items() if status == "fail")
        assert not failing, f"hiradix: the report marks {failing} as failed"
