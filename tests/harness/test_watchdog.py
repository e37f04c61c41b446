"""A conformance test that hangs inside code with no bound of its own ends the run naming it, with every thread's stack.

A synthetic suite's test waits on an event nobody sets (the shape of torch's
extension build polling a lock file left by a killed build). With the bounds
scaled down, the watchdog must end the process naming the test and showing the
frame that waited; under xdist the controller must report the crash on that
test and run the next test on a fresh worker.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.bounds import SCALE_ENV
from conformance.plugin.watchdog import EXIT_STATUS

SUITE = '''
import threading

import pytest


@pytest.mark.clause("S5")
def test_hangs(impl):
    threading.Event().wait()  # nothing sets it


@pytest.mark.clause("S5")
def test_after(impl):
    assert impl.name == "hiradix"
'''

SCALE = "0.003"  # the test bound becomes 2.7 s


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("watchdog")
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "test_synthetic.py").write_text(SUITE)
    return root


def run(subprocess_pytest, workdir: Path, *args: str):
    return subprocess_pytest.run(workdir, "--cache-impl", "caches.adapters:hiradix", "-p", "no:randomly",
                                 "test_synthetic.py", *args, env_extra={SCALE_ENV: SCALE})


def test_a_hung_test_ends_the_process_naming_it_and_its_stack(subprocess_pytest, workdir):
    result = run(subprocess_pytest, workdir, "-k", "hangs")
    out = result.stdout + result.stderr
    assert result.returncode == EXIT_STATUS, out
    assert "test_synthetic.py::test_hangs[hiradix] did not finish within 2.7 s" in out, out
    assert 'test_synthetic.py", line 9 in test_hangs' in out, out  # the frame that waited, in the main thread's stack


def test_under_xdist_the_crash_names_the_test_and_the_run_goes_on(subprocess_pytest, workdir):
    result = run(subprocess_pytest, workdir, "-n", "1")
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert "crashed while running 'test_synthetic.py::test_hangs[hiradix]'" in out, out
    assert "1 failed, 1 passed" in out, out


def test_a_test_within_the_bound_is_left_alone(subprocess_pytest, workdir):
    result = run(subprocess_pytest, workdir, "-k", "after")
    assert result.returncode == 0, result.stdout + result.stderr
