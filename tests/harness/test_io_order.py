"""A cache that follows the spec in another IO order passes once it declares that order (conformance/ADAPTERS.md).

per_batch_adapter.py loads every KV batch together with its indexer pages;
the shared core loads all of KV first. Declared (io_order =
"extras_with_each_batch"), the suite's expectations follow it: the
exploration's schedule counts come from the spec's model for that order, and
tests that drive IO in the default order skip, saying so. Undeclared, the
exploration catches the difference.
"""

from __future__ import annotations

import os
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def run_suite(subprocess_pytest, factory: str, *args: str):
    env = {"PYTHONPATH": os.pathsep.join([str(HERE), str(REPO)])}  # the adapter module, as a third party's would be importable
    return subprocess_pytest.run(REPO, *args, "-q", "-n", "0", "-rs", "--cache-impl", f"per_batch_adapter:{factory}",
                                 fixtures=False, env_extra=env)


def test_a_cache_declaring_another_io_order_passes_the_suite(subprocess_pytest):
    result = run_suite(subprocess_pytest, "factory", "conformance/")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    row = next(line for line in out.splitlines() if line.startswith("hiradix_per_batch/cpu "))
    assert "F" not in row.split(None, 1)[1] and " P" in row, row
    # Every schedule the spec allows in that order was explored (the default order yields 578 for this pool set).
    assert "interleavings explored: hiradix_per_batch 1903" in out, out[-2000:]
    assert " deselected" in out and " skipped" not in out  # tests driving the default order are not collected for it


def test_the_same_cache_declaring_nothing_fails_the_exploration(subprocess_pytest):
    result = run_suite(subprocess_pytest, "undeclared", "conformance/suite/test_exploration.py", "-k", "wait_complete/2batches and not tick and not abort")
    out = result.stdout + result.stderr
    assert result.returncode == 1, out[-4000:]
    assert "F1: after " in out and "an IO order other than the declared one, 'kv_then_extras'" in out, out[-4000:]
