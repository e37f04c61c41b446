"""One run of the conformance suite against one implementation, with or without a mutant applied.

The suite runs in a child process, `python -m pytest --pyargs conformance
-x` under xdist, in the caller's directory and environment, so it runs as
the user runs it (their pytest configuration included), after its decision
table alone (FIRST_PHASE), so that a change to the vote is named by the vote's clause. A mutant reaches
every process of the run through the import hook (importhook.py); the
first failure and the clauses it names come back through the
first_failure plugin. A kill whose first failure names no clause (a test's
setup assertion seeing a consequence) runs the suite once more without -x:
the earliest failure that names a clause is then the kill's, the first one
kept beside it. A run past its time limit is killed with its whole
process group (the child is started in a session of its own, so that
group is exactly the run: workers, forkserver, ranks).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from conformance.mutants import importhook
from conformance.mutants.first_failure import RESULT_ENV

KILLED, SURVIVED, STILLBORN, TIMEOUT = "killed", "survived", "stillborn", "timeout"
_LOG_TAIL_LINES = 12


@dataclass(frozen=True)
class SuiteOptions:
    impl: str  # the --cache-impl value: 'package.module:factory'
    jobs: str  # pytest-xdist's -n: a number or "auto"; "0" runs the tests in the pytest process itself
    keyword: str | None = None  # pytest -k
    timeout_s: float | None = None


@dataclass(frozen=True)
class RunOutcome:
    status: str
    seconds: float
    test: str | None = None  # the first failing test's node id
    clauses: tuple[str, ...] = ()  # what its failure names
    message: str | None = None  # the line naming the first clause, or the exception line
    applied_in: int = 0  # processes that executed the mutated module
    exit_status: int | None = None
    log_tail: str = ""
    first_unnamed: str | None = None  # the test that failed first naming no clause, where a later one named one

    def as_json(self) -> dict[str, Any]:
        return {"status": self.status, "seconds": round(self.seconds, 2), "test": self.test, "clauses": list(self.clauses),
                "message": self.message, "applied_in_processes": self.applied_in, "exit_status": self.exit_status,
                "first_failed_naming_no_clause": self.first_unnamed}


# The suite's cause-level tests, run alone and first: a change to the decision then fails the decision
# table, naming the vote's clause, before a scenario that only sees its consequence can, whichever
# xdist worker would have been quicker.
FIRST_PHASE = "conformance.suite.test_decision"


def pytest_command(options: SuiteOptions, *, target: str = "conformance", jobs: str | None = None, stop_at_first: bool = True) -> list[str]:
    command = [sys.executable, "-m", "pytest", "--pyargs", target, "--cache-impl", options.impl, *(["-x"] if stop_at_first else []), "-q",
               "-p", "conformance.mutants.first_failure", "-p", "no:cacheprovider", "-n", jobs or options.jobs]
    return command + (["-k", options.keyword] if options.keyword else [])


def _run(command: list[str], env: dict[str, str], log_path: Path, limit_s: float | None) -> int | None:
    """The exit status, or None when the run passed its limit (then its whole process group is killed)."""
    with open(log_path, "ab") as log:
        child = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            return child.wait(limit_s)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)  # the run's own group: pytest, its workers, the ranks they started
            child.wait()
            return None


def run_suite(options: SuiteOptions, workdir: Path, *, module: str | None = None, file: str | None = None,
              source: str | None = None) -> RunOutcome:
    """Run the suite once in `workdir` (fresh, the run's own); with a module's mutated source applied when given."""
    workdir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env[RESULT_ENV] = str(workdir / "result.json")
    env.pop(importhook.MUTANT_ENV, None)
    if source is not None:
        assert module is not None and file is not None
        try:
            compile(source, file, "exec", dont_inherit=True)
        except SyntaxError as exc:
            return RunOutcome(STILLBORN, 0.0, message=f"SyntaxError: {exc}")
        env[importhook.MUTANT_ENV] = str(importhook.write_record(workdir, module=module, file=file, source=source))
        site = importhook.write_site(workdir)
        env["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, [env.get("PYTHONPATH")])])
    log_path = workdir / "pytest.log"
    log_path.write_bytes(b"")
    started = time.monotonic()
    code = _run(pytest_command(options, target=FIRST_PHASE, jobs="0"), env, log_path, options.timeout_s)
    if code in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):  # the decision table passed (or -k left none of it): the whole suite
        left = None if options.timeout_s is None else max(options.timeout_s - (time.monotonic() - started), 1.0)
        code = _run(pytest_command(options), env, log_path, left)
    outcome = _outcome(workdir, code, time.monotonic() - started, log_path, mutated=source is not None)
    if outcome.status == KILLED and not outcome.clauses and not (outcome.test or "").startswith("(pytest exit"):
        outcome = _named_by_a_later_failure(options, workdir, env, log_path, started, outcome)
    return outcome


def _named_by_a_later_failure(options: SuiteOptions, workdir: Path, env: dict[str, str], log_path: Path, started: float,
                              outcome: RunOutcome) -> RunOutcome:
    """The whole suite again, past every failure: the earliest one naming a clause is the kill's (the first stays beside it).

    -x stopped at a consequence (a setup assertion, a hang's bound) that names
    no rule; which other test would have named the cause depended on which
    worker was quicker. Past its time limit, or with no failure naming a
    clause, the first kill stands.
    """
    left = None if options.timeout_s is None else options.timeout_s - (time.monotonic() - started)
    if left is not None and left < 1.0:
        return outcome
    naming_env = dict(env, **{RESULT_ENV: str(workdir / "naming.json")})
    code = _run(pytest_command(options, stop_at_first=False), naming_env, log_path, left)
    named = _result(workdir / "naming.json").get("first_naming_failure") if code is not None else None
    if not named:
        return outcome
    return replace(outcome, seconds=time.monotonic() - started, test=named.get("nodeid"), clauses=tuple(named.get("clauses") or ()),
                   message=named.get("message"), first_unnamed=outcome.test)


def _outcome(workdir: Path, code: int | None, seconds: float, log_path: Path, *, mutated: bool) -> RunOutcome:
    tail = "\n".join(log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-_LOG_TAIL_LINES:])
    applied = len(importhook.markers(workdir, importhook.APPLIED))
    stillborn = importhook.markers(workdir, importhook.STILLBORN)
    if mutated and stillborn:
        return RunOutcome(STILLBORN, seconds, message=stillborn[0].splitlines()[0], applied_in=applied, exit_status=code, log_tail=tail)
    if code is None:
        return RunOutcome(TIMEOUT, seconds, applied_in=applied, log_tail=tail)
    result = _result(workdir / "result.json")
    if code == 0:
        return RunOutcome(SURVIVED, seconds, applied_in=applied, exit_status=code, log_tail=tail)
    first = result.get("first_failure") or {}
    if not first:  # the run failed without a test failing: an internal error, a usage error, nothing collected
        last = tail.splitlines()[-1] if tail else ""
        return RunOutcome(KILLED, seconds, test=f"(pytest exit {code})", message=last, applied_in=applied, exit_status=code, log_tail=tail)
    return RunOutcome(KILLED, seconds, test=first.get("nodeid"), clauses=tuple(first.get("clauses") or ()),
                      message=first.get("message"), applied_in=applied, exit_status=code, log_tail=tail)


def _result(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # killed before the session finished, or it never started
        return {}
