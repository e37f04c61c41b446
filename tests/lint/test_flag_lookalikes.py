"""HC101 says why a check that looks like the guard is not one: it reads a name like
the completion flag's, and whether anything defines that name."""

from __future__ import annotations

from pathlib import Path

import pytest

from lint.pools import looks_like_flag

CACHE = '''class Cache:
    def can_terminate_prefetch(self, op):
        completed = op.completed_tokens == len(op.hash_value) * self.page_size
        if completed and op.pool_transfers and not {check}:
            completed = False
        return completed

    def start_prefetch(self, request, pool_transfers):
        return PrefetchOperation(request, pool_transfers)
'''

OPERATION = '''class PrefetchOperation:
    def __init__(self, request, pool_transfers):
        self.request = request
        self.pool_transfers = pool_transfers
        self.pool_transfers_done = not pool_transfers
'''

NOWHERE = "nothing in the linted files, the configured implementations or the project tree defines"


@pytest.fixture
def project(isolated: Path) -> Path:
    (isolated / "operation.py").write_text(OPERATION)
    return isolated


def finding(run_cli, cwd: Path, *paths: str) -> str:
    proc = run_cli(*paths, cwd=cwd)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (line,) = proc.stdout.splitlines()
    return line


def test_a_lookalike_that_nothing_defines_is_named(project, run_cli):
    (project / "cache.py").write_text(CACHE.format(check="op.pool_transfers_finished"))
    line = finding(run_cli, project, "cache.py", "operation.py")
    assert line.startswith("cache.py:2:5: HC101 [error] Cache.can_terminate_prefetch has no pool_transfers_done guard")
    assert "; it reads 'pool_transfers_finished' (line 4), not 'pool_transfers_done' (" in line
    assert line.endswith(f"; {NOWHERE} 'pool_transfers_finished')")


def test_a_lookalike_defined_elsewhere_says_where(project, run_cli):
    (project / "operation.py").write_text(OPERATION + "        self.transfers_done = False\n")
    (project / "cache.py").write_text(CACHE.format(check='getattr(op, "transfers_done", True)'))
    line = finding(run_cli, project, "cache.py", "operation.py")
    assert "; it reads 'transfers_done' (line 4), not 'pool_transfers_done' (" in line
    assert line.endswith("; operation.py:6 defines 'transfers_done')")


def test_correct_code_and_other_misses_say_nothing_of_it(project, run_cli):
    guarded = CACHE.format(check="op.pool_transfers_done")
    (project / "cache.py").write_text(guarded)
    proc = run_cli("cache.py", "operation.py", cwd=project)
    assert (proc.returncode, proc.stdout) == (0, "")
    (project / "cache.py").write_text(CACHE.format(check="op.ready"))
    assert "it reads" not in finding(run_cli, project, "cache.py", "operation.py")


@pytest.mark.parametrize("name, expected", [
    ("pool_transfers_finished", True), ("transfers_done", True), ("pool_transfer_done", True),
    ("extra_pools_ready", True), ("poolTransfersComplete", True), ("pool_transfers_dnoe", True),
    ("pool_transfers_done", False), ("pool_transfers", False), ("pool_transfers_present", False),
    ("completed_tokens", False), ("is_done", False), ("comp_xfers", False), ("extra_pools", False),
])
def test_which_names_look_like_the_flag(name, expected):
    assert looks_like_flag(name, "pool_transfers_done") is expected
