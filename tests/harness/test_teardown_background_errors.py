"""Conformance teardown fails when an implementation reports unexpected background-thread errors.

A synthetic suite of one passing test runs, in a subprocess, against a real
cache whose adapter reports a background error through the optional
`background_errors()` member of the adapter protocol: the test must end in a
teardown error naming it. The same suite against the unmodified cache passes.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest


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

from conformance.scenarios.workload import request_data, request_tokens, store


@pytest.mark.clause("S5")
def test_roundtrip(make_cache):
    cache = make_cache()
    tokens = request_tokens(1, 8)
    store(cache, tokens, request_data(cache, tokens, 1))
'''


def run(subprocess_pytest, workdir: Path, factory: str) -> subprocess.CompletedProcess:
    return subprocess_pytest.run(workdir, "--cache-impl", f"synthetic_adapters:{factory}", "-q", "-k", "cpu", "test_synthetic.py")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("teardown")
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "synthetic_adapters.py").write_text(ADAPTERS)
    (root / "test_synthetic.py").write_text(SUITE)
    return root


def test_teardown_fails_naming_the_background_error(subprocess_pytest, workdir):
    result = run(subprocess_pytest, workdir, "reporting")
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert re.search(r"1 passed.* 1 error", out) and "ERROR at teardown of test_roundtrip[reporting-cpu]" in out, out
    assert "background" in out and "KeyError: 'planted'" in out, out


def test_teardown_passes_without_background_errors(subprocess_pytest, workdir):
    result = run(subprocess_pytest, workdir, "quiet")
    assert result.returncode == 0, result.stdout + result.stderr
