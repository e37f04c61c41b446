"""`pytest conformance/ --sglang PATH`, as a user runs it, on the hand-written checkouts in tests/sglang_checkouts.

The two checkouts stand for upstream before PR #27550 (HiRadixCache without
the extra-pool guard) and after it (all three classes with the vote-forcing
guard; unified without a timeout cap). The suite must fail each class on
exactly the clauses of its shape, and the report must say which shape, in
words; bad paths and names the shim cannot map are one usage-error line; a
class the checkout lacks is reported and the run goes on.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # real suite runs in subprocesses

REPO = Path(__file__).resolve().parents[2]
CHECKOUTS = REPO / "tests" / "sglang_checkouts"
SHIM = "caches.upstream_decision:sglang_adapters"
RUN_TIMEOUT_S = 300
# The decision table, the timeout budget, the guard's placement, the timeout with a pool transfer held, and one
# multi-rank scenario (upstream's code then reduces through the shim's torch.distributed).
SELECTION = ("sglang and (test_every_decision_state or test_timeout_budget or test_guard_enters or test_io_past_the_timeout"
             " or (test_extra_pool_pending_on_one_rank and timeout-2ranks))")
VOTE_FORCING = "matches upstream's vote-forcing guard (PR #27550): timeout cannot end the wait while pool IO is pending"
NO_GUARD = "matches upstream before its extra-pool guard (HiRadixCache at 991689fd0~1)"


def command(*args: str, quiet: bool = True, tests: str = "conformance") -> list[str]:
    return [sys.executable, "-m", "pytest", tests, "-p", "no:cacheprovider", *(["-q"] if quiet else []), "-n", "0",
            "--sglang-shim", SHIM, *args]


def env() -> dict[str, str]:
    return {**os.environ, "CUDA_VISIBLE_DEVICES": ""}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess, dict]]:
    """Both checkouts, run in parallel: name -> (process, JSON report)."""
    out = tmp_path_factory.mktemp("sglang")
    started = {}
    for name in ("fixed", "pre_fix"):
        args = command("--sglang", str(CHECKOUTS / name), "-k", SELECTION, "--tb=line", "--conformance-report", str(out / name))
        started[name] = subprocess.Popen(args, cwd=REPO, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    done = {}
    try:
        for name, process in started.items():
            output, _ = process.communicate(timeout=RUN_TIMEOUT_S)
            report = out / f"{name}.json"
            assert report.exists(), f"--sglang {name} wrote no report (exit {process.returncode}):\n{output[-4000:]}"
            done[name] = (subprocess.CompletedProcess(process.args, process.returncode, output, ""), json.loads(report.read_text()))
    finally:
        for process in started.values():
            if process.poll() is None:
                process.kill()
                process.communicate()
    return done


def failed_here(report: dict, impl: str) -> dict[str, str]:
    """{clause: 'fail' or 'diverge'} of the clauses that failed here."""
    return {c: status for c, status in report["outcomes"][impl]["cpu"].items() if status in ("fail", "diverge")}


# The vote-forcing guard holds a landed wait for a pending pool past the deadline: upstream's design, the spec's
# divergence (spec/divergences.py), so its D5 and L2 diverge; the missing guard (D3) and a budget with no cap (T1) fail.
FORCED = {"D5": "diverge", "L2": "diverge"}
EXPECTED = {
    "fixed": {"sglang:hiradix": (FORCED, VOTE_FORCING),
              "sglang:unified_radix": ({**FORCED, "T1": "fail"}, VOTE_FORCING),
              "sglang:hi_mamba_radix": (FORCED, VOTE_FORCING)},
    "pre_fix": {"sglang:hiradix": ({"D3": "fail"}, NO_GUARD),
                "sglang:unified_radix": ({**FORCED, "T1": "fail"}, VOTE_FORCING),
                "sglang:hi_mamba_radix": (FORCED, VOTE_FORCING)},
}


@pytest.mark.parametrize("checkout", sorted(EXPECTED))
def test_each_class_fails_the_clauses_of_its_shape_and_the_report_says_which(runs, checkout):
    process, report = runs[checkout]
    assert process.returncode == 1, process.stdout[-4000:]
    for impl, (clauses, shape) in EXPECTED[checkout].items():
        assert failed_here(report, impl) == clauses, f"{checkout} {impl}: failed here {failed_here(report, impl)}\n{process.stdout[-4000:]}"
        assert report["failing"][impl]["cpu"]["naming_no_clause"] == [], report["failing"][impl]["cpu"]
        matches = report["decision_table"][impl]["cpu"]["matches"]
        assert matches.startswith(shape), matches
        assert shape in process.stdout
    assert "no cap (its budget looks like" in process.stdout
    # Every class of the checkout ran; the built-in caches the selection left out are listed as not run, saying so.
    assert [m["impl"] for m in report["not_run"] if m["impl"].startswith("sglang:")] == []
    assert all(m["reason"] == "no test of it was selected in this run" for m in report["not_run"]), report["not_run"]


def test_the_report_lists_the_disagreeing_rows(runs):
    _, report = runs["pre_fix"]
    rows = report["decision_table"]["sglang:hiradix"]["cpu"]["rows"]
    states = {json.dumps(r["state"], sort_keys=True) for r in rows}
    assert len(states) == 6 and {r["clause"] for r in rows} == {"D3"}
    assert all(r["expected_vote"] is False and r["got_vote"] is True for r in rows)


def usage(*args: str) -> subprocess.CompletedProcess:
    # One small test file is enough: the options are read, and the adapters built, before collection.
    return subprocess.run(command(*args, "--co", quiet=False, tests="conformance/suite/test_smoke_roundtrip.py"), cwd=REPO, env=env(), capture_output=True, text=True, timeout=RUN_TIMEOUT_S)


def error_lines(result: subprocess.CompletedProcess) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("ERROR")]


def test_a_path_that_is_not_a_checkout_is_one_usage_error(tmp_path):
    result = usage("--sglang", str(tmp_path))
    assert result.returncode == 4, result.stdout + result.stderr
    assert error_lines(result) == [f"ERROR: invalid --sglang: '{tmp_path.resolve()}' "
                                   "(accepted: the root of an SGLang checkout (a folder containing python/sglang/srt/mem_cache/))"]
    assert "Traceback" not in result.stderr


def test_a_name_the_shim_does_not_map_stops_the_run_with_one_line(tmp_path):
    root = tmp_path / "checkout"
    shutil.copytree(CHECKOUTS / "fixed", root)
    path = root / "python/sglang/srt/mem_cache/hi_mamba_radix_cache.py"
    path.write_text(path.read_text().replace("operation.pool_transfers_done", "operation.pool_transfers_finished"))
    result = usage("--sglang", str(root))
    assert result.returncode == 4 and len(error_lines(result)) == 1, result.stdout + result.stderr
    line = error_lines(result)[0]
    assert "HiMambaRadixCache.can_terminate_prefetch" in line and "operation.pool_transfers_finished (the operation)" in line, line


def test_a_class_the_checkout_lacks_is_reported_and_the_others_run(tmp_path):
    root = tmp_path / "checkout"
    shutil.copytree(CHECKOUTS / "fixed", root)
    (root / "python/sglang/srt/mem_cache/unified_radix_cache.py").unlink()
    result = usage("--sglang", str(root), "-k", "sglang")
    assert result.returncode == 0, result.stdout + result.stderr
    why = "python/sglang/srt/mem_cache/unified_radix_cache.py is not in this checkout"
    assert f"conformance: sglang:unified_radix not run: {why}" in result.stdout
    assert f"not run: sglang:unified_radix: {why}" in result.stdout
    assert "sglang:hiradix-cpu" in result.stdout and "sglang:unified_radix-" not in result.stdout


def test_a_vote_reduced_over_another_group_than_its_class_uses_fails_x2(tmp_path):
    """HiRadixCache's class reduces over its attention groups; a decision reducing its vote over tp_group
    instead is X2's defect (the groups test expects the class's own rule, read from its code)."""
    root = tmp_path / "checkout"
    shutil.copytree(CHECKOUTS / "fixed", root)
    path = root / "python/sglang/srt/mem_cache/hiradix_cache.py"
    text = path.read_text()
    vote = "        self._all_reduce_attn_groups(states, torch.distributed.ReduceOp.MAX)\n"
    assert vote in text
    path.write_text(text.replace(vote, "        torch.distributed.all_reduce(states, op=torch.distributed.ReduceOp.MAX, group=self.tp_group)\n"))
    select = "test_2x2_groups_skewed_io and (sglang:hiradix or sglang:hi_mamba_radix)"
    result = subprocess.run(command("--sglang", str(root), "-k", select, "--tb=line"), cwd=REPO, env=env(),
                            capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 failed, 1 passed" in result.stdout, result.stdout
    line = next(line for line in result.stdout.splitlines() if "X2: rank 0 reduced its votes over" in line)
    assert "['tp:0,1,2,3']" in line and "['attn_cp:0,2', 'attn_tp:0,1']" in line, line
    assert "hiradix_cache.py:24: HiRadixCache._all_reduce_attn_groups reduces over the attention groups" in line, line
