"""Verdicts end to end: what an adapter declares decides what its failures mean, in a real pytest run.

Two adapters wrap the built-in hiradix cache. "drain_shaped" declares the
ACK-drain profile and a deployment that never aborts on one rank (with
evidence); "plain" declares nothing, so it is judged as the spec's own
architecture by every scenario. The same failing tests then read as a defect
for one and as not judged or not applicable for the other; hardening reads
as hardening for both. A failure pytest cannot format (as upstream frames
have made it) is reported, not an INTERNALERROR, in one process and under xdist.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ADAPTERS = '''
from caches.adapters import hiradix


class Declared:
    def __init__(self, name, **declarations):
        self._base = hiradix()
        self.name = name
        self.capabilities = frozenset()
        self.default_extra_pools = ()
        for key, value in declarations.items():
            setattr(self, key, value)

    def create(self, env):
        return self._base.create(env)


def drain_shaped():
    return Declared(
        "drain_shaped", profile="ack_drain",
        profile_evidence=["cache.py:12: _can_terminate_prefetch never votes yes under wait_complete"],
        deployment={"abort_on_one_rank": (False, ["scheduler.py:40: every request is broadcast to every rank"])})


def plain():
    return Declared("plain")


def bad_profile():
    return Declared("bad_profile", profile="drain")


def bad_deployment():
    return Declared("bad_deployment", deployment={"aborts_anywhere": (True, ["x.py:1: y"])})
'''

SUITE = '''
import pytest


@pytest.mark.precondition("abort_on_one_rank")
@pytest.mark.clause("S4")
def test_abort_on_one_rank(impl):
    assert False, "S4: the ranks committed different lengths"


@pytest.mark.clause("D3")
def test_vote_guard(impl):
    assert False, "D3: stopped while the extra pool was still written"


@pytest.mark.clause("C2")
def test_validation(impl):
    assert False, "C2: accepted a page size of 0"


@pytest.mark.clause("S1")
def test_safe(impl):
    pass


@pytest.mark.clause("S3")
def test_unformattable(impl):
    raise AssertionError("S3: freed under IO (unformattable)")
'''

# Formatting this test's traceback raises, as parsing an upstream frame's source once did.
CONFTEST = '''
from _pytest._code.code import ExceptionInfo

_original = ExceptionInfo.getrepr


def _crashing(self, *args, **kwargs):
    if "unformattable" in str(self.value):
        raise SystemError("AST constructor recursion depth mismatch (before=1, after=2)")
    return _original(self, *args, **kwargs)


ExceptionInfo.getrepr = _crashing
'''


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("verdicts")
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "declared_adapters.py").write_text(ADAPTERS)
    (root / "test_declared.py").write_text(SUITE)
    (root / "conftest.py").write_text(CONFTEST)
    return root


def _run(subprocess_pytest, workdir: Path, workers: str):
    report = workdir / "out" / f"n{workers}"
    result = subprocess_pytest.run(workdir, "--cache-impl", "declared_adapters:drain_shaped", "--cache-impl", "declared_adapters:plain",
                                   "--conformance-report", str(report), "-n", workers, "-rs")
    assert result.returncode == 1, f"expected test failures (exit 1), got {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-2000:]}"
    assert "INTERNALERROR" not in result.stdout + result.stderr, result.stdout[-3000:]
    return result, json.loads(report.with_name(report.name + ".json").read_text())


@pytest.fixture(scope="module", params=["0", "2"], ids=["one-process", "xdist"])
def run(subprocess_pytest, workdir: Path, request):
    return _run(subprocess_pytest, workdir, request.param)


def test_the_same_failures_are_defects_for_one_deployment_and_not_judged_for_another(run):
    result, data = run
    plain, drain = data["matrix"]["plain"]["cpu"], data["matrix"]["drain_shaped"]["cpu"]
    assert (plain["S4"], drain["S4"]) == ("defect", "not-judged")
    assert (plain["D3"], drain["D3"]) == ("defect", "not-applicable")
    assert (plain["C2"], drain["C2"]) == ("hardening", "hardening")
    assert (plain["S1"], drain["S1"]) == ("pass", "pass")
    assert (plain["A1"], drain["A1"]) == ("not-applicable", "uncovered")
    notes = data["cell_notes"]["drain_shaped"]["cpu"]
    assert notes["S4"]["kind"] == "agreement" and "scheduler.py:40: every request is broadcast to every rank" in notes["S4"]["why"]
    assert notes["D3"]["why"].startswith("mechanism of vote_per_check, fenced_vote; the implementation declares ack_drain")
    assert "cache.py:12" in notes["D3"]["why"]
    # Tests that say nothing about drain_shaped were not collected for it: no phantom items, the reason in the report.
    left_out = {e["nodeid"].split("::")[1]: e["state"] for e in data["not_collected"]}
    assert left_out == {"test_abort_on_one_rank[drain_shaped]": "not-judged", "test_vote_guard[drain_shaped]": "not-applicable"}
    assert not any(t["impl"] == "drain_shaped" and t["outcome"] == "skip" for t in data["tests"])
    assert data["declarations"]["drain_shaped"]["deployment"]["abort_on_one_rank"]["produced"] is False
    assert data["declarations"]["plain"]["profile_declared"] is False
    # The summary counts defects first, then what may be hardened.
    line = next(line for line in result.stdout.splitlines() if line.startswith("plain/cpu: "))
    assert line.startswith("plain/cpu: 3 defect, 1 hardening,") and "defects: D3, S3, S4" in line and "hardening not met: C2" in line, line


def test_a_failure_pytest_cannot_format_is_still_reported(run):
    result, data = run
    failed = {t["nodeid"].split("::")[1]: t for t in data["tests"] if t["outcome"] == "fail"}
    assert failed["test_unformattable[plain]"]["failed_clauses"] == {"S3": "S3: freed under IO (unformattable)"}
    assert "(the traceback could not be formatted: SystemError: AST constructor recursion depth mismatch" in result.stdout


@pytest.mark.parametrize("factory, message", [
    ("bad_profile", "invalid adapter bad_profile profile: 'drain' (accepted: one of spec.profiles.PROFILES: fenced_vote, vote_per_check, ack_drain, drain_vote)"),
    ("bad_deployment", "invalid adapter bad_deployment deployment: 'aborts_anywhere' (accepted: a precondition of spec.preconditions: "),
])
def test_a_bad_declaration_is_one_usage_line(subprocess_pytest, workdir: Path, factory, message):
    result = subprocess_pytest.run(workdir, "--cache-impl", f"declared_adapters:{factory}", "-q")
    assert result.returncode == 4, result.stdout + result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr, result.stderr
