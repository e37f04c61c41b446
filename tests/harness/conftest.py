"""Shared by the harness tests that run pytest as a user does: `subprocess_pytest` starts a real pytest.

The process runs in a directory of the test's (its own pytest.ini, so this
repository's settings stay out), with this checkout's packages first on the
path, no GPU visible (GPU params skip on any machine), and the suite's
plugin loaded as the installed entry point would (plus the fixtures module
for generated suites outside the package, as a project's own tests load it).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from conformance.plugin.recorder import clause_texts
from conformance.report.defects import defects_of
from conformance.report.matrix import ConformanceReport, OutcomeRecord
from spec.clauses import CATALOGUE

REPO = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 300
# Test modules here import the shared helper modules beside them directly (tests are not a package).
sys.path.insert(0, str(Path(__file__).parent))


@dataclass(frozen=True)
class PytestProcess:
    repo: Path = REPO
    timeout_s: float = RUN_TIMEOUT_S

    def command(self, *args: str, fixtures: bool = True) -> list[str]:
        plugins = ["-p", "conformance.plugin", *(["-p", "conformance.plugin.fixtures"] if fixtures else [])]
        return [sys.executable, "-m", "pytest", *plugins, "-p", "no:cacheprovider", "-p", "no:benchmark", *args]

    def env(self, workdir: Path | None = None, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
        env["CUDA_VISIBLE_DEVICES"] = ""
        # This checkout's packages, not an installed copy of them (the run's directory is elsewhere).
        path = (str(workdir) if workdir else None, str(self.repo), os.environ.get("PYTHONPATH"))
        env["PYTHONPATH"] = os.pathsep.join(p for p in path if p)
        env.update(extra)
        return env

    def run(self, workdir: Path, *args: str, fixtures: bool = True, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """pytest in workdir (which is on the path too, for generated adapter modules)."""
        return subprocess.run(self.command(*args, fixtures=fixtures), cwd=workdir, env=self.env(workdir, **(env_extra or {})),
                              capture_output=True, text=True, timeout=self.timeout_s)


@pytest.fixture(scope="session")
def subprocess_pytest() -> PytestProcess:
    return PytestProcess()


LIVE_TREE = "/work/sglang@9e9fde147"
LIVE_IMPLS = [f"sglang-live:{c}@9e9fde147" for c in ("HiRadixCache", "HiMambaRadixCache")]


def _live_shaped_report() -> dict:
    """A report shaped like a --sglang-live run's: two classes of one tree, each on cpu and cuda, every third clause failing."""
    records = []
    for impl in LIVE_IMPLS:
        for index, clause in enumerate(CATALOGUE):
            record = OutcomeRecord(f"conformance/suite/test_x.py::test_{clause.lower()}[{impl}-cpu]", impl, "cpu", [clause], outcome="pass")
            record.pytest_outcome = "pass"
            if index % 3 == 0:  # every third clause fails, each its own entry
                record.outcome = record.pytest_outcome = "fail"
                record.failed_clauses = {clause: f"{clause}: what went wrong with {clause}, said in a sentence of some length"}
            records.append(record)
    results = ConformanceReport(records, {impl: ["cpu", "cuda"] for impl in LIVE_IMPLS}, list(CATALOGUE), device_reasons={"cuda": "no GPU"}).as_json()
    implementations = [{"name": impl, "source": "--sglang-live", "source_value": LIVE_TREE, "factory": None, "module": "conformance.live",
                        "distribution": None, "adapter": "conformance.live.adapter.LiveAdapter", "capabilities": [], "checkout": None}
                       for impl in LIVE_IMPLS]
    data = {"schema_version": 2, "suite": {"name": "hicache-conformance", "version": "0", "commit": "0" * 40, "modified": False},
            "run": {"started": "2026-01-01T00:00:00+00:00", "finished": "2026-01-01T00:08:00+00:00", "duration_s": 480.0,
                    "pytest_args": ["conformance/", "--sglang-live", LIVE_TREE]},
            "target": {"torch": "2", "python": "3", "platform": "linux", "device_kinds": ["cpu"], "devices": []},
            "implementations": implementations, **results, "clauses": clause_texts()}
    data["defects"] = defects_of(data)
    return data


@pytest.fixture
def live_shaped_report():
    """Builds the sample report: each call a fresh one, so a test may change it."""
    return _live_shaped_report
