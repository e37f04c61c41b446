"""The conformance suite as a cache maintainer gets it: `pip install 'hicache-conformance[conformance]'`.

The wheel built from this checkout goes into a fresh virtual environment (no
editable install, no system site-packages, nothing of this checkout on the
path), and the suite runs from another directory with `pytest --pyargs
conformance` against an adapter module of the maintainer's own, written
here (it wraps a built-in cache under another name). The run must write a
report that passes the installed schema and says what was tested; in a
session about other tests, the installed plugin must stay out of the way.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import venv
from pathlib import Path

import jsonschema
import pytest

pytestmark = pytest.mark.slow  # builds a virtual environment with torch

REPO = Path(__file__).resolve().parents[2]
VERSION = re.search(r'^version = "([^"]+)"', (REPO / "pyproject.toml").read_text(), re.MULTILINE).group(1)
TORCH = "torch==2.13.0"  # the CPU wheel on disk; a loose requirement would pull a CUDA build
RUN_TIMEOUT_S = 600
SELECTION = "test_config or test_smoke or test_every_decision_state or (test_skewed_kv_progress and 2ranks)"

THEIR_ADAPTER = '''
"""A maintainer's adapter (here the built-in hiradix cache under another name)."""
from caches.adapters import hiradix


class ThirdPartyAdapter:
    name = "third_party"

    def __init__(self):
        self._base = hiradix()
        self.capabilities = self._base.capabilities
        self.default_extra_pools = self._base.default_extra_pools

    def configure(self, fields):
        self._base.configure(fields)

    def create(self, env):
        return self._base.create(env)


def make_adapter():
    return ThirdPartyAdapter()
'''

UNRELATED_TESTS = '''
import sys

import pytest


@pytest.fixture
def clock():
    return "their clock"


@pytest.mark.parametrize("impl", [1, 2])
def test_their_own_impl_and_clock(impl, clock):
    assert clock == "their clock"
    suite_modules = [m for m in sys.modules if m.split(".")[0] in ("torch", "caches", "spec") or m.startswith("conformance.")]
    assert suite_modules == ["conformance.plugin"], suite_modules
'''


def run(*command: str | Path, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHON"))}  # nothing of this checkout
    env["CUDA_VISIBLE_DEVICES"] = ""
    return subprocess.run([str(c) for c in command], cwd=cwd, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)


@pytest.fixture(scope="module")
def suite_env(dists, tmp_path_factory) -> Path:
    env_dir = tmp_path_factory.mktemp("suite") / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    installed = run(python, "-m", "pip", "install", "-q", "--disable-pip-version-check", TORCH, f"{dists['wheel']}[conformance]",
                    cwd=env_dir)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return env_dir


@pytest.fixture
def their_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "their_repo"
    repo.mkdir()
    (repo / "third_party_cache.py").write_text(THEIR_ADAPTER)
    return repo


def test_the_installed_suite_runs_a_third_party_adapter_and_reports_it(suite_env, their_repo):
    result = run(suite_env / "bin" / "python", "-m", "pytest", "--pyargs", "conformance", "-p", "no:cacheprovider", "-n", "2",
                 "--cache-impl", "third_party_cache:make_adapter", "--cache-impl", "caches.adapters:hiradix",
                 "-k", SELECTION, "--conformance-report", "out/report", cwd=their_repo)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "conformance: implementations third_party, hiradix" in out and "conformance matrix" in out, out
    assert "NumPy" not in out, out  # numpy comes with the extra: torch does not warn
    data = json.loads((their_repo / "out" / "report.json").read_text())
    suite = data["suite"]
    site = Path(suite["path"])
    assert site.is_relative_to(suite_env) and site.name == "conformance", suite  # the wheel's copy, not this checkout
    schema = json.loads((site / "report" / "schema.json").read_text())  # the schema ships with the package
    errors = [f"{list(e.path)}: {e.message}" for e in jsonschema.Draft202012Validator(schema).iter_errors(data)]
    assert not errors, errors
    assert suite["version"] == VERSION and suite["commit"] is None  # a wheel carries no git history
    impls = {i["name"]: i for i in data["implementations"]}
    assert (impls["third_party"]["module"], impls["third_party"]["adapter"], impls["third_party"]["distribution"]) == (
        "third_party_cache", "third_party_cache.ThirdPartyAdapter", None)
    assert impls["hiradix"]["distribution"] == {"name": "hicache-conformance", "version": VERSION}
    assert data["target"]["device_kinds"] == ["cpu"] and data["devices_not_run"][0]["device"] == "cuda"
    row = data["matrix"]["third_party"]["cpu"]
    assert {row[c] for c in ("C1", "C2", "D3", "S5", "X1")} == {"pass"}, row  # incl. a multi-rank run of the maintainer's module
    assert set(data["matrix"]["third_party"]["cuda"].values()) <= {"not-run", "uncovered"}
    assert "third_party_cache.ThirdPartyAdapter" in (their_repo / "out" / "report.html").read_text()


def test_the_installed_plugin_stays_out_of_other_sessions(suite_env, tmp_path):
    project = tmp_path / "unrelated"
    project.mkdir()
    (project / "test_unrelated.py").write_text(UNRELATED_TESTS)
    result = run(suite_env / "bin" / "python", "-m", "pytest", "-v", "-p", "no:cacheprovider", cwd=project)
    out = result.stdout + result.stderr
    assert result.returncode == 0 and "2 passed" in out, out
    assert "plugins: xdist" in out and "hicache-conformance" in out, out  # loaded through its entry point ...
    assert "conformance:" not in out and "conformance matrix" not in out, out  # ... and silent
    helped = run(suite_env / "bin" / "python", "-m", "pytest", "--help", cwd=project)
    for option in ("--cache-impl", "--sglang", "--sglang-shim", "--sglang-live", "--conformance-report", "--conformance-repro",
                   "--expected-failures", "--clause"):
        assert option in helped.stdout, option
    lint = run(suite_env / "bin" / "hicache-lint", "--version", cwd=project)
    assert lint.returncode == 0 and lint.stdout.startswith("hicache-lint "), lint.stdout + lint.stderr
