"""Conformance teardown fails when an implementation reports unexpected background-thread errors.

A synthetic suite of one passing test runs, in a subprocess, against a real
cache whose adapter reports a background error through the optional
`background_errors()` member of the adapter protocol: the test must end in a
teardown error naming it. The same suite against the unmodified cache passes.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

ADAPTERS = '''
from caches.adapters import hiradix


class Reporting:
    def __init__(self, session):
        self._session = session

    def __getattr__(self, name):
        return getattr(self._session, name)

    def background_errors(self):
        return ["hiradix-r0-io thread failed on request r: KeyError: 'planted'"]


class Adapter:
    def __init__(self, report):
        self._base = hiradix()
        self.name = "reporting" if report else "quiet"
        self.capabilities = self._base.capabilities
        self.default_extra_pools = ()
        self._report = report

    def create(self, env):
        session = self._base.create(env)
        return Reporting(session) if self._report else session


def reporting():
    return Adapter(True)


def quiet():
    return Adapter(False)
'''

SUITE = '''
import pytest

from conformance.scenarios import request_data, request_tokens, store


@pytest.mark.clause("S5")
def test_roundtrip(make_cache):
    cache = make_cache()
    tokens = request_tokens(1, 8)
    store(cache, tokens, request_data(cache, tokens, 1))
'''


def run(workdir: Path, factory: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["CUDA_VISIBLE_DEVICES"] = ""
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(workdir), str(REPO), os.environ.get("PYTHONPATH")) if p)
    command = [sys.executable, "-m", "pytest", "-p", "conformance.conftest", "-p", "no:cacheprovider", "-p", "no:benchmark",
               "--cache-impl", f"synthetic_adapters:{factory}", "-q", "-k", "cpu", "test_synthetic.py"]
    return subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("teardown")
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "synthetic_adapters.py").write_text(ADAPTERS)
    (root / "test_synthetic.py").write_text(SUITE)
    return root


def test_teardown_fails_naming_the_background_error(workdir):
    result = run(workdir, "reporting")
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert re.search(r"1 passed.* 1 error", out) and "ERROR at teardown of test_roundtrip[reporting-cpu]" in out, out
    assert "background" in out and "KeyError: 'planted'" in out, out


def test_teardown_passes_without_background_errors(workdir):
    result = run(workdir, "quiet")
    assert result.returncode == 0, result.stdout + result.stderr
