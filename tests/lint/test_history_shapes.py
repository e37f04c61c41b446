"""Each shape SGLang's HiRadixCache had over the fork's history, in hand-written
samples laid out like SGLang's tree, with the verdict each must get:

- KV only (no extra pools): nothing owed, nothing said;
- extra pools read with the KV pages, no completion flag anywhere (before
  736263f3d): nothing can be guarded yet, nothing said (a note if configured);
- extra pools read after KV, the flag defined by the controller, no guard in
  HiRadixCache (736263f3d until #27550): HC101, naming both lines, and --diff
  writes #27550's guard;
- the guard after the cross-rank reduce, whatever it forces: HC103, exit 1;
- 0.5.2x's ACK drain: checked in its commit path with no configuration, clean.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from upstream_samples import CACHE, CONTROLLER, FIXED, KV_ONLY, PREFIX, SAMPLES

FIXED_GUARD = ('        if (\n            completed\n            and getattr(operation, "pool_transfers", None)\n'
               '            and not getattr(operation, "pool_transfers_done", True)\n        ):\n')
REDUCE = "        self._all_reduce_attn_groups(states, torch.distributed.ReduceOp.MAX)\n"


def checkout(root: Path, cache: str, controller: str) -> Path:
    (root / ".git").mkdir()
    for relative, text in ((CACHE, cache), (CONTROLLER, (SAMPLES / "history" / controller).read_text())):
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    return root


def codes(proc) -> list[str]:
    return [line.split()[1] for line in proc.stdout.splitlines()]


def test_a_kv_only_cache_owes_no_guard(tmp_path, run_cli):
    assert "extra_pools" not in KV_ONLY and "pool_transfers" not in KV_ONLY
    root = checkout(tmp_path, KV_ONLY, "controller_pools_after_kv.py.txt")
    proc = run_cli(str(CACHE), cwd=root)
    assert (proc.returncode, proc.stdout, proc.errors) == (0, "", "")
    assert proc.summary.startswith("hicache-lint: 1 method checked"), proc.summary


def test_pools_read_with_kv_and_no_flag_anywhere_owe_no_guard(tmp_path, run_cli):
    root = checkout(tmp_path, PREFIX, "controller_pools_with_kv.py.txt")
    proc = run_cli(str(CACHE), cwd=root)
    assert (proc.returncode, proc.stdout) == (0, ""), proc.stdout
    # a configuration that says the class has extra pools gets a note saying what is missing
    (root / "python" / "pyproject.toml").write_text(
        '[tool.hicache-lint]\nimplementations = [{method = "sglang/srt/mem_cache/hiradix_cache.py::'
        'HiRadixCache.can_terminate_prefetch", extra-pools = true}]\n')
    proc = run_cli(str(CACHE), cwd=root)
    (note,) = proc.stdout.splitlines()
    assert proc.returncode == 0 and " HC109 " in note, note
    assert "no 'pool_transfers_done' flag exists" in note and "brings extra-pool transfers in" not in note


def test_pools_after_kv_with_the_flag_and_no_guard_is_the_race(tmp_path, run_cli):
    root = checkout(tmp_path, PREFIX, "controller_pools_after_kv.py.txt")
    proc = run_cli(str(CACHE), cwd=root)
    assert proc.returncode == 1 and codes(proc) == ["HC101"], proc.stdout
    pools_line = PREFIX.splitlines().index('        return {"extra_pools": [self.indexer_pool]}') + 1
    flag_line = next(n for n, line in enumerate((SAMPLES / "history" / "controller_pools_after_kv.py.txt")
                                                 .read_text().splitlines(), 1)
                     if "self.pool_transfers_done = not pool_transfers" in line)
    assert (f"(extra pools: line {pools_line} names 'extra_pools'; their completion flag: "
            f"{CONTROLLER.as_posix()}:{flag_line} defines 'pool_transfers_done')") in proc.stdout
    # the fix spells the guard as a sibling reads the fields, as at 991689fd0~1
    sibling = CACHE.with_name("unified_radix_cache.py")
    shutil.copy(SAMPLES / "upstream" / "unified_radix.py.txt", root / sibling)
    diff = run_cli("--diff", str(CACHE), str(sibling), cwd=root)
    assert ("+        if completed and getattr(operation, \"pool_transfers\", None) and not "
            "getattr(operation, \"pool_transfers_done\", True):\n+            can_terminate = False\n") in diff.stdout


@pytest.mark.parametrize("forced", ["can_terminate", "completed"])
@pytest.mark.parametrize("helper", ["defined", "inherited"])
def test_a_guard_after_the_reduce_is_an_error_whatever_it_forces(tmp_path, run_cli, forced, helper):
    guard = FIXED_GUARD + f"            {forced} = False\n"
    assert FIXED_GUARD + "            can_terminate = False\n" in FIXED and REDUCE in FIXED
    text = FIXED.replace(FIXED_GUARD + "            can_terminate = False\n", "").replace(REDUCE, REDUCE + guard)
    if helper == "inherited":  # 0.5.2x's classes reduce through a helper a base class may define
        start = text.index("    def _all_reduce_attn_groups")
        text = text[:start] + text[text.index("    def _timeout_grows_with_hit"):]
    root = checkout(tmp_path, text, "controller_pools_after_kv.py.txt")
    proc = run_cli(str(CACHE), cwd=root)
    assert proc.returncode == 1, proc.stdout
    assert "HC103" in codes(proc) and "HC107" not in codes(proc), proc.stdout
    assert "after the cross-rank reduce" in proc.stdout


def test_the_ack_drain_is_checked_in_its_commit_path_with_no_configuration(tmp_path, run_cli):
    (tmp_path / ".git").mkdir()
    shutil.copy(SAMPLES / "upstream_0_5_2x" / "unified_radix.py.txt", tmp_path / "unified_radix_cache.py")
    proc = run_cli("unified_radix_cache.py", cwd=tmp_path)
    assert (proc.returncode, proc.stdout, proc.errors) == (0, "", "")
    assert proc.summary.startswith("hicache-lint: 1 method checked in 1 of 1 file: 0 errors"), proc.summary


def test_the_output_does_not_depend_on_hash_seed_or_file_order(tmp_path):
    import os
    import subprocess
    import sys

    root = checkout(tmp_path, PREFIX, "controller_pools_after_kv.py.txt")
    names = []
    for sample in ("unified_radix", "hi_mamba_radix"):
        target = CACHE.with_name(f"{sample}_cache.py")
        shutil.copy(SAMPLES / "upstream" / f"{sample}.py.txt", root / target)
        names.append(str(target))
    outputs = set()
    for seed, order in (("0", [str(CACHE), *names]), ("1", [*reversed(names), str(CACHE)]),
                        ("4242", [names[1], str(CACHE), names[0]])):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        proc = subprocess.run([sys.executable, "-m", "lint", *order], cwd=root, env=env, capture_output=True,
                              text=True, timeout=120)
        outputs.add(proc.stdout)
    (output,) = outputs
    assert [line.split()[1] for line in output.splitlines()] == ["HC107", "HC101", "HC104", "HC107"]
