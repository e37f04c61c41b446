"""What a run of the suite prints: a quiet progress line, and the matrix coloured only in a terminal.

Real pytest processes, some under a pseudo-terminal (the way a person runs
the suite), so that colour is decided as it is for them: on in a TTY, off
when piped or when NO_COLOR is set (pytest's own terminal rules).
"""

from __future__ import annotations

import os
import pty
import select
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 300
GREEN_PASS = "\x1b[32mP\x1b[0m"

ADAPTER = '''
from caches.adapters import hiradix


def good():
    return hiradix()
'''

SUITE = '''
import pytest


@pytest.mark.clause("S1")
def test_cites(impl, device):
    assert impl.name == "hiradix"
'''


def terminal_env(subprocess_pytest, workdir: Path, no_color: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in subprocess_pytest.env(workdir, TERM="xterm").items() if k not in ("NO_COLOR", "FORCE_COLOR", "PY_COLORS")}
    return env if no_color is None else {**env, "NO_COLOR": no_color}


def run_in_a_terminal(subprocess_pytest, workdir: Path, *args: str, no_color: str | None = None) -> str:
    """The process's output as a terminal shows it (its stdout and stderr are a pseudo-terminal)."""
    command, env = subprocess_pytest.command(*args, fixtures=False), terminal_env(subprocess_pytest, workdir, no_color)
    leader, follower = pty.openpty()
    process = subprocess.Popen(command, cwd=workdir, env=env, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower)
    os.close(follower)
    chunks, deadline = [], time.monotonic() + RUN_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 1.0)
            if not ready:
                if process.poll() is not None:
                    break
                continue
            try:
                data = os.read(leader, 65536)
            except OSError:  # EIO: the terminal closed with the process
                break
            if not data:
                break
            chunks.append(data)
        else:
            process.kill()
            raise AssertionError(f"pytest under a terminal did not end within {RUN_TIMEOUT_S}s: {b''.join(chunks)[-2000:]!r}")
    finally:
        os.close(leader)
    process.wait(timeout=RUN_TIMEOUT_S)
    return b"".join(chunks).decode(errors="replace")


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "adapters_under_test.py").write_text(ADAPTER)
    (tmp_path / "test_suite.py").write_text(SUITE)
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["conformance.plugin.fixtures"]\n')  # as a project with its own tests does
    return tmp_path


def matrix_row(output: str, label: str) -> str:
    return next(line for line in output.splitlines() if line.startswith(label))


def test_the_matrix_is_coloured_in_a_terminal(subprocess_pytest, workdir):
    out = run_in_a_terminal(subprocess_pytest, workdir, "--cache-impl", "adapters_under_test:good", "-q")
    assert GREEN_PASS in matrix_row(out, "hiradix/cpu"), out


@pytest.mark.parametrize("no_color", ["1", "yes"])
def test_no_color_turns_the_colour_off(subprocess_pytest, workdir, no_color):
    out = run_in_a_terminal(subprocess_pytest, workdir, "--cache-impl", "adapters_under_test:good", "-q", no_color=no_color)
    assert "hiradix/cpu" in out and "\x1b[" not in out, out


def test_piped_output_has_no_colour(subprocess_pytest, workdir):
    command, env = subprocess_pytest.command("--cache-impl", "adapters_under_test:good", "-q", fixtures=False), terminal_env(subprocess_pytest, workdir)
    result = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert result.returncode == 0, result.stdout + result.stderr
    assert " P" in matrix_row(result.stdout, "hiradix/cpu") and "\x1b[" not in result.stdout + result.stderr, result.stdout


def test_exploration_keeps_the_progress_line_whole_and_counts_once(subprocess_pytest):
    """-q prints one progress line; the schedule counts come once, in the summary (not one line per test)."""
    result = subprocess_pytest.run(REPO, "conformance/suite/test_exploration.py", "-q", "-n", "0", "--cache-impl", "caches.adapters:hiradix",
                                "-k", "2batches and not tick and not abort", fixtures=False)
    lines = result.stdout.splitlines()
    assert result.returncode == 0, result.stdout + result.stderr
    assert lines[0].startswith("...") and lines[0].endswith("[100%]"), lines[:3]  # 3 scenarios, one line of progress
    counted = [line for line in lines if "explored" in line]
    assert counted == ["interleavings explored: hiradix 20"], counted
