"""Shared fixtures for the linter tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SAMPLES = Path(__file__).resolve().parent / "samples"


@pytest.fixture
def samples() -> Path:
    return SAMPLES


@pytest.fixture
def run_cli():
    """Run `python -m lint ...` in a subprocess; returns CompletedProcess."""

    def run(*args: str, cwd: Path | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
        return subprocess.run(
            [sys.executable, "-m", "lint", *args],
            cwd=str(cwd or REPO), env=env, capture_output=True, text=True, timeout=timeout,
        )

    return run


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cwd with no pyproject.toml above it that has our table."""
    monkeypatch.chdir(tmp_path)
    return tmp_path
