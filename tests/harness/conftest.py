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

REPO = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 300


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
