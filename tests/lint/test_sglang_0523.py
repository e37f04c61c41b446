"""HC108's verdict on SGLang 0.5.2x's real UnifiedRadixCache, read from a user's checkout.

Runs only when HICACHE_SGLANG_0523 names a source tree of the 0.5.2x line
(the `python/` folder of a checkout, or the checkout itself); nothing of it is
kept here. The file is linted as it is (no finding) and with each of its three
`pool_transfers_done` checks removed in turn (one HC108 at that check's line):
the final ACK's release in the drain's nested function, the discard path of
the helper `_handle_prefetch_result` calls in a condition, and the abort's
release of `comp_xfers`. With no configuration at all the file's real methods
are checked (the defaults know the ACK drain) and it is clean, and each
realistic mutation below is flagged.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ENV = "HICACHE_SGLANG_0523"
RELATIVE = Path("sglang", "srt", "mem_cache", "unified_radix_cache.py")
ENTRY = ('{method = "unified_radix_cache.py::UnifiedRadixCache._can_terminate_prefetch", guard = "commit", '
         'commit = ["_handle_prefetch_result", "_drain_storage_control_queues_impl", "release_aborted_request"], '
         'sidecar-fields = ["pool_transfers", "comp_xfers"]}')

# each check, as a pattern whose group 1 is the sidecar value it gates (kept when the check goes)
CHECKS = {
    "final ACK release (nested in _drain_storage_control_queues_impl)": (
        r"(operation\.pool_transfers)\s+if not operation\.pool_transfers_done\s+else None",
        "(through _drain_ack_prefetch, called at line ", "at the final ACK without a pool_transfers_done check"),
    "discard path (_check_hybrid_prefetch_result, called in a condition)": (
        r"(pool_transfers) if operation\.pool_transfers_done else None",
        "UnifiedRadixCache._handle_prefetch_result (through _check_hybrid_prefetch_result, called at line ",
        "outside a pool_transfers_done check"),
    "abort release of comp_xfers (release_aborted_request)": (
        r"(\[x for xfers in info\.comp_xfers\.values\(\) for x in xfers\])\s+"
        r"if info\.operation\.pool_transfers_done\s+else None",
        "UnifiedRadixCache.release_aborted_request commits or releases sidecar results ('comp_xfers')",
        "outside a pool_transfers_done check"),
}


# (pattern, replacement, fragment of the finding): realistic changes to the real file
MUTATIONS = {
    "the flag set on every ACK": (
        r"(\n(\s+)operation = ack\.operation\n)((?:.*\n)*?)\s+operation\.pool_transfers_done = True\n",
        r"\1\2operation.pool_transfers_done = True\n\3", "sets pool_transfers_done to True where no test shows"),
    "the flag set with the KV progress ACK": (
        r"(if ack\.completed_tokens is not None:\n)", r"\1                    operation.pool_transfers_done = True\n",
        "sets pool_transfers_done to True"),
    "the abort takes comp_xfers by unpacking the record": (
        r"(completed_tokens, _ = self\.cache_controller\.terminate_prefetch\(info\.operation\)\n)((?:.*\n)*?)"
        r"\s+\(\s*\[x for xfers in info\.comp_xfers\.values\(\) for x in xfers\]\s+"
        r"if info\.operation\.pool_transfers_done\s+else None\s*\),",
        r"\1        *_, comp_xfers = info\n\2            [x for xfers in comp_xfers.values() for x in xfers],",
        "release_aborted_request commits or releases sidecar results ('comp_xfers')"),
    "the abort revokes an allocated hit": (
        r"if info\.operation\.host_indices is None:", "if info.operation.is_terminated():",
        "(through revoke_pending_prefetch, called at line "),
    "the final ACK's release on every ACK": (
        r"if ack\.completed_req:\n", "if ack.completed_req or ack.completed_tokens is not None:\n",
        "while pool transfers are pending and before their IO ended"),
    "the commit skips the all-or-nothing check": (
        r"        if not self\._check_hybrid_prefetch_result\(\n[^)]*\):\n[^\n]*\n\s+return\n", "",
        "_handle_prefetch_result commits or releases sidecar results ('comp_xfers')"),
}


@pytest.fixture(scope="module")
def upstream_source() -> str:
    tree = os.environ.get(ENV)
    if not tree:
        pytest.skip(f"{ENV} is not set: give a SGLang 0.5.2x source tree to check HC108 on upstream's own file")
    for base in (Path(tree), Path(tree) / "python"):
        if (base / RELATIVE).is_file():
            return (base / RELATIVE).read_text()
    pytest.fail(f"{ENV}={tree}: no {RELATIVE} under it or under its python/ folder")


def lint(run_cli, tmp_path: Path, text: str):
    (tmp_path / "unified_radix_cache.py").write_text(text)
    (tmp_path / "pyproject.toml").write_text(f"[tool.hicache-lint]\nimplementations = [{ENTRY}]\n")
    return run_cli("--repo", cwd=tmp_path)


def test_the_unmodified_file_is_clean(upstream_source, run_cli, tmp_path):
    proc = lint(run_cli, tmp_path, upstream_source)
    assert (proc.returncode, proc.stdout, proc.errors) == (0, "", "")


@pytest.mark.parametrize("check", list(CHECKS))
def test_removing_one_check_is_reported_at_its_line(upstream_source, run_cli, tmp_path, check):
    pattern, where, why = CHECKS[check]
    (match,) = re.finditer(pattern, upstream_source)  # the check is there, once
    line = upstream_source.count("\n", 0, match.start()) + 1
    proc = lint(run_cli, tmp_path, upstream_source[:match.start()] + match.group(1) + upstream_source[match.end():])
    assert proc.returncode == 1, proc.stderr
    (finding,) = proc.stdout.splitlines()
    col = match.start() - upstream_source.rfind("\n", 0, match.start())
    assert finding.startswith(f"unified_radix_cache.py:{line}:{col}: HC108 "), finding
    assert where in finding and why in finding, finding


def test_with_no_configuration_the_real_methods_are_checked_and_clean(upstream_source, run_cli, tmp_path):
    (tmp_path / "unified_radix_cache.py").write_text(upstream_source)
    proc = run_cli("unified_radix_cache.py", cwd=tmp_path)
    assert (proc.returncode, proc.stdout, proc.errors) == (0, "", "")
    assert proc.summary.startswith("hicache-lint: 1 method checked in 1 of 1 file: 0 errors"), proc.summary


@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_each_mutation_is_flagged_with_no_configuration(upstream_source, run_cli, tmp_path, mutation):
    pattern, replacement, fragment = MUTATIONS[mutation]
    mutated, count = re.subn(pattern, replacement, upstream_source, count=1)
    assert count == 1 and mutated != upstream_source, f"{mutation}: the pattern no longer matches this release"
    (tmp_path / "unified_radix_cache.py").write_text(mutated)
    proc = run_cli("unified_radix_cache.py", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    findings = proc.stdout.splitlines()
    assert findings and all(" HC108 " in f for f in findings), findings
    assert any(fragment in f for f in findings), findings
