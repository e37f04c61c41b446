"""`--fix` checked the way a user consumes it: on a copy of this repository, each
of our caches loses its guard, `--fix` puts one back, and then both the linter
and the conformance decision tests must pass on the fixed file."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CACHES = {
    "hiradix": "caches/hiradix.py",
    "unified_radix": "caches/unified_radix.py",
    "hi_mamba_radix": "caches/hi_mamba_radix.py",
}
IGNORED = shutil.ignore_patterns(".git", "__pycache__", ".pytest_cache", "*.egg-info", "build", "dist", ".venv")


def run(args: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, *args], cwd=str(cwd), env=env, capture_output=True, text=True,
                          timeout=timeout)


def delete_guard(path: Path) -> str:
    """Remove the one `if` that reads pool_transfers_done, with its body."""
    lines = path.read_text().split("\n")
    hits = [i for i, line in enumerate(lines) if "pool_transfers_done" in line]
    assert len(hits) == 1, f"{path}: expected one guard line, found {len(hits)}"
    start = hits[0]
    assert lines[start].lstrip().startswith("if "), lines[start]
    indent = len(lines[start]) - len(lines[start].lstrip())
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or len(lines[end]) - len(lines[end].lstrip()) > indent):
        end += 1
    removed = "\n".join(lines[start:end])
    del lines[start:end]
    path.write_text("\n".join(lines))
    assert "pool_transfers_done" not in path.read_text()
    return removed


@pytest.mark.slow
@pytest.mark.parametrize("cache", list(CACHES))
def test_fix_restores_a_deleted_guard_that_lint_and_the_suite_accept(tmp_path, cache):
    repo = tmp_path / "repo"
    shutil.copytree(REPO, repo, ignore=IGNORED)
    target = repo / CACHES[cache]
    delete_guard(target)
    suite = ["-m", "pytest", "conformance", "-k", "decision", "--cache-impl", f"caches.adapters:{cache}",
             "-n", "0", "-q", "-p", "no:cacheprovider"]

    # teeth: the copy is what runs, and without the guard it is caught twice
    broken = run(suite + ["-x"], repo)
    assert broken.returncode == 1, broken.stdout[-2000:] + broken.stderr[-2000:]
    lint = run(["-m", "lint", CACHES[cache]], repo)
    assert lint.returncode == 1 and " HC101 " in lint.stdout, lint.stdout + lint.stderr

    fixed = run(["-m", "lint", "--fix", CACHES[cache]], repo)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert f"fixed: {CACHES[cache]}: " in fixed.stderr
    text = target.read_text()
    assert "pool_transfers_done" in text
    # the snapshot the method reads has these fields; `progress.pool_transfers` does not exist
    assert "pool_transfers_present" in text.split("def can_terminate_prefetch")[1].split("def ")[0]

    again = run(["-m", "lint", "--repo"], repo)
    assert (again.returncode, again.stdout) == (0, "")
    assert again.stderr.startswith("hicache-lint: 3 methods checked in 3 of 3 files: 0 errors, 0 warnings"), again.stderr
    passed = run(suite, repo)
    assert passed.returncode == 0, passed.stdout[-3000:] + passed.stderr[-2000:]
    assert " passed" in passed.stdout
