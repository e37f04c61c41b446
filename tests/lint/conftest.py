"""Shared fixtures for the linter tests."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# Test modules here import the shared samples module directly (tests are not a package).
sys.path.insert(0, str(Path(__file__).parent))
from upstream_samples import SAMPLES  # noqa: E402
SUMMARY = re.compile(r"^hicache-lint: \d+ methods? checked in ")


class Run(subprocess.CompletedProcess):
    """A finished `python -m lint`: `errors` is stderr without the summary line, `summary` that line."""

    @property
    def errors(self) -> str:
        return "".join(line for line in self.stderr.splitlines(keepends=True) if not SUMMARY.match(line))

    @property
    def summary(self) -> str:
        return next((line for line in self.stderr.splitlines() if SUMMARY.match(line)), "")


@pytest.fixture
def samples() -> Path:
    return SAMPLES


@pytest.fixture
def run_cli():
    """Run `python -m lint ...` in a subprocess; returns a `Run`."""

    def run(*args: str, cwd: Path | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
        proc = subprocess.run(
            [sys.executable, "-m", "lint", *args],
            cwd=str(cwd or REPO), env=env, capture_output=True, text=True, timeout=timeout,
        )
        return Run(proc.args, proc.returncode, proc.stdout, proc.stderr)

    return run


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cwd with no pyproject.toml above it that has our table."""
    monkeypatch.chdir(tmp_path)
    return tmp_path
