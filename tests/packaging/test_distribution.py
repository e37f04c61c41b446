"""What a user gets from `pip install`: the wheel's files and the base install.

The wheel is built from this checkout and installed into a fresh virtual
environment (no system site-packages), then used from another directory, the
way a user meets it.
"""

from __future__ import annotations

import subprocess
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # builds distributions and a virtual environment

DATA_FILES = [
    "spec/SPEC.md", "spec/py.typed", "caches/py.typed", "lint/py.typed", "lint/README.md",
    "conformance/py.typed", "conformance/ADAPTERS.md", "conformance/report/schema.json", "conformance/suite/conftest.py",
    "conformance/plugin/expected_failures/hiradix.toml", "conformance/plugin/expected_failures/unified_radix.toml",
    "conformance/plugin/expected_failures/hi_mamba_radix.toml",
]


def run(*command: str | Path, cwd: Path | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in command], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def test_wheel_carries_every_data_file_and_the_license(dists):
    names = set(zipfile.ZipFile(dists["wheel"]).namelist())
    missing = [f for f in DATA_FILES if f not in names]
    assert not missing, f"the wheel lacks {missing}"
    assert any(n.endswith(".dist-info/licenses/LICENSE") or n.endswith(".dist-info/LICENSE") for n in names)
    assert not any("__pycache__" in n for n in names)


def test_sdist_carries_the_tests(dists):
    with tarfile.open(dists["sdist"]) as tar:
        names = tar.getnames()
    root = names[0].split("/")[0]
    for path in ("tests/spec/test_decision.py", "tests/lint/samples", "LICENSE", "conformance/plugin/expected_failures/hiradix.toml"):
        assert any(n == f"{root}/{path}" or n.startswith(f"{root}/{path}/") for n in names), f"the sdist lacks {path}"


def test_base_install_is_the_linter_and_nothing_heavy(dists, tmp_path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    installed = run(python, "-m", "pip", "install", "-q", "--disable-pip-version-check", dists["wheel"])
    assert installed.returncode == 0, installed.stdout + installed.stderr
    listed = run(python, "-m", "pip", "list", "--format=freeze")
    names = {line.split("==")[0].lower() for line in listed.stdout.splitlines()}
    assert "libcst" in names and not names & {"torch", "pytest", "pytest-xdist"}, sorted(names)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    sample = elsewhere / "cache.py"
    sample.write_text(
        # The class brings extra-pool transfers in, and the flag tracking them exists: a guard is owed (HC101).
        "class C:\n    def start(self, op, transfers):\n        op.pool_transfers, op.pool_transfers_done = transfers, not transfers\n\n"
        "    def can_terminate_prefetch(self, op):\n"
        "        completed = op.completed_tokens == len(op.hash_value) * self.page_size\n"
        "        if self.prefetch_stop_policy == 'wait_complete':\n            return completed\n        return True\n")
    lint = run(env_dir / "bin" / "hicache-lint", sample, cwd=elsewhere)
    assert lint.returncode == 1 and "HC101" in lint.stdout, lint.stdout + lint.stderr
    spec = run(python, "-m", "spec", "clause", "D3", cwd=elsewhere)
    assert spec.returncode == 0 and spec.stdout.startswith("D3."), spec.stdout + spec.stderr
    assert run(python, "-c", "import spec.doc as d; assert not d.is_stale()", cwd=elsewhere).returncode == 0, "SPEC.md must ship with the spec"


def test_the_build_warns_of_nothing_deprecated(dists):
    # A deprecated metadata form (the `project.license` table) is a warning today and an error in a later backend.
    warned = [line for line in dists["build_log"].splitlines() if "deprecat" in line.lower()]
    assert warned == [], "the build warns:\n" + "\n".join(warned)
