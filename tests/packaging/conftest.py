"""The distributions built from this checkout, shared by the packaging tests (one build per test process).

They are built from a copy of the checkout's files (those git tracks or would
track), so that nothing left in build/ by an earlier build can slip into them
and the checkout gets no build/ folder of its own.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT_S = 600


def _run(*command: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in command], cwd=cwd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)


def _source_copy(target: Path) -> Path:
    listed = _run("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=REPO)
    if listed.returncode != 0:  # not a git checkout (an unpacked sdist): every file but build products
        shutil.copytree(REPO, target, ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__", ".git"),
                        dirs_exist_ok=True)
        return target
    for name in filter(None, listed.stdout.split("\0")):
        source = REPO / name
        if source.is_file():  # a tracked file deleted in the work tree is not part of it
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


@pytest.fixture(scope="session")
def dists(tmp_path_factory) -> dict[str, Path | str]:
    source = _source_copy(tmp_path_factory.mktemp("source"))
    out = tmp_path_factory.mktemp("dist")
    built = _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", out, source)
    assert built.returncode == 0, built.stdout + built.stderr
    sdist = _run(sys.executable, "-c", "from setuptools import build_meta as b; import sys; print(b.build_sdist(sys.argv[1]))", out, cwd=source)
    assert sdist.returncode == 0, sdist.stdout + sdist.stderr
    (wheel,) = out.glob("*.whl")
    (archive,) = out.glob("*.tar.gz")
    return {"wheel": wheel, "sdist": archive, "build_log": built.stdout + built.stderr + sdist.stdout + sdist.stderr}
