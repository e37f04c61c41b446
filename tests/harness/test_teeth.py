"""The harness has teeth: each known-bad variant (caches/variants) fails the
conformance suite naming the clauses it breaks, while the real cache it
derives from passes the very same tests in the very same run, so the
failures come from the variants, not the harness.

Each run is a real `python -m pytest conformance ...` subprocess over several
adapters (--cache-impl, repeated); the runs go in parallel. The failure text
of each variant must name its clauses ("D3: ..."), and the report's matrix
must mark them "fail" (failed here). The variants shaped like upstream's
code before and after PR #27550 run through the whole suite, and must fail
their clauses only: no other clause failed here, and the report matches
each to its upstream shape; so must the variant whose matches ignore the
sliding window (F10 alone).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from caches.variants import EXPECTED_FAILURES, ONLY_THESE
from conformance.adapter import ENTRY_POINT_GROUP

pytestmark = pytest.mark.slow  # real suite runs in subprocesses

REPO = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 300
# The built-in implementations: the registered adapters of this package (its pyproject's entry points, the one list).
BUILTINS = tuple(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.value.startswith("caches.adapters:"))


@dataclass(frozen=True)
class Selection:
    keyword: str | None  # -k expression; None: the whole suite
    variants: tuple[str, ...]
    baseline: str | None  # the built-in cache the variants derive from, run alongside (None: not in this run)


# The cross-rank explorations: the whole-suite runs leave them out, as they leave the 4-rank launches (each explores
# many schedules on ranks); the runs of the cross-rank variants below select them.
CROSSRANK = "test_every_cross_rank_divergence"

# run name -> what it runs and must catch
RUNS = {
    "decision": Selection("test_decision", ("guard_missing", "guard_on_vote", "guard_after_reduce"), "hiradix"),
    "windows": Selection("test_windows", ("upstream_windows",), "hiradix"),
    # The whole suite, so "only these clauses" means something (its 4-rank runs repeat the 2-rank ones
    # at twice the cost); hiradix passes all of it in the main run.
    "upstream_shapes": Selection(f"not 4ranks and not {CROSSRANK}", ("upstream_pre_fix", "upstream_vote_forcing"), None),
    # Two ranks suffice; each failing launch also waits out the hang bound for the rank left in its commit.
    "terminated_on_one_rank": Selection("test_terminated_on_one_rank and 2ranks", ("payload_drops_terminated",), "hi_mamba_radix"),
    # Matches that ignore the sliding window: the whole suite, so that F10 alone failing means something.
    "swa_window": Selection(f"not 4ranks and not {CROSSRANK}", ("window_unchecked",), "unified_radix_swa"),
    # A window attached on the ranks that loaded it only: two ranks serve different prefixes.
    "swa_ranks": Selection("test_every_rank_serves_the_same_prefix", ("window_agreed_locally",), "unified_radix_swa"),
    # Pages of another host layout (the same bytes in another order) under one namespace: the whole
    # single-rank suite, so that S6 alone failing means the namespace is all that changed.
    "foreign_layout": Selection(f"not 2ranks and not 4ranks and not 2x2 and not {CROSSRANK}", ("namespace_ignores_layout", "namespace_dtype_by_width"), None),
    # Deployments of another world size over one storage: shards of the same shape, told apart by the world size alone.
    "foreign_world_size": Selection("test_pages_of_another_world_size", ("namespace_ignores_world_size",), "hiradix"),
    # A load-back whose state finds no device slot but the one its own path holds.
    "state_room": Selection("test_state_room", ("state_slot_of_the_path",), "unified_radix"),
    # A scheduler path that drops a waiting request and tells the cache nothing; the real hiradix declares no paths (skips).
    "abort_paths": Selection("test_every_scheduler_abort_path", ("abort_path_tells_cache_nothing",), "hiradix"),
    # A host tier with less room than the prefetch: the slots shrink and the page keys must with them.
    "degraded_allocation": Selection("full_host_tier", ("degraded_key_kept",), "hiradix"),
    # A node split before its host copy is acknowledged: the backup must still store the head's pages.
    "split_backups": Selection("test_split_backups", ("split_head_unbacked",), "hiradix"),
    # IO moved between a snapshot and its use: a vote that reads the live operation, a commit snapshot taken before the mark.
    "snapshot_holds": Selection("test_snapshot_holds", ("vote_reads_live_progress", "snapshot_before_mark"), "hiradix"),
    # A load-back whose KV copy fails while its indexer copy still writes the same slots.
    "load_back_copies": Selection("test_load_back_copies", ("free_ignores_load_backs",), "hiradix"),
    # A storage read held past close()'s bound: close must stop the thread or say it did not.
    "close": Selection("test_close", ("close_returns_quietly",), "hiradix"),
    # Host eviction while a prefetch hangs below a host-only node.
    "anchor_pins": Selection("test_anchor_pins", ("anchor_pin_released_early",), "hiradix"),
    # The window's last page lost after the existence check.
    "damaged_pages": Selection("test_damaged_pages", ("window_counts_leading_pages",), "unified_radix_swa"),
    # A context-parallel pair whose tp group is each rank alone (DP attention): a vote over the tp group reaches no peer.
    "cp_under_dp_attention": Selection("context_parallel_ranks", ("vote_over_tp_group_only",), "unified_radix"),
    # Four ranks as 2x2 vote groups; one rank's extra vote on one group.
    "groups": Selection("2x2", ("extra_vote_on_one_group",), "unified_radix"),
    # The cross-rank explorer finds each cross-rank class from what it explores, no scenario naming the defect.
    "crossrank": Selection(f"{CROSSRANK} and landed/best_effort", ("drain_skipped_when_idle", "sidecar_hit_unreduced"),
                           "hiradix"),
    "crossrank_state": Selection(f"{CROSSRANK} and landed/best_effort", ("state_attached_locally",), "hi_mamba_radix"),
    "crossrank_groups": Selection(f"{CROSSRANK} and groups", ("vote_over_attn_tp_only",), "unified_radix"),
}
SHAPE_WORDS = {
    "upstream_pre_fix": "matches upstream before its extra-pool guard (HiRadixCache at 991689fd0~1)",
    "upstream_vote_forcing": "matches upstream's vote-forcing guard (PR #27550): timeout cannot end the wait while pool IO is pending",
}
# Shaped exactly like an upstream design the spec departs from by intent: its clauses read "diverge", never "fail".
DIVERGES_BY_DESIGN = {"upstream_vote_forcing": "landed-kv-waits"}
SECTION = re.compile(r"^_+ (?:ERROR at \w+ of )?(\S+?) _+$", re.MULTILINE)  # long ids get one underscore a side
SUMMARY = re.compile(r"^(FAILED|ERROR|PASSED) (\S+)", re.MULTILINE)


@dataclass
class Run:
    selection: str
    impls: tuple[str, ...]
    baseline: str | None
    returncode: int
    output: str
    report: dict | None

    def impl_of(self, test_id: str) -> str | None:
        params = test_id.partition("[")[2]
        return next((impl for impl in self.impls if params.startswith(impl + "-") or params == impl + "]"), None)

    def failure_text(self, impl: str) -> str:
        """The failure sections (tracebacks and messages) of impl's tests."""
        headers = list(SECTION.finditer(self.output))
        parts = []
        for index, header in enumerate(headers):
            end = headers[index + 1].start() if index + 1 < len(headers) else len(self.output)
            if self.impl_of(header.group(1)) == impl:
                parts.append(self.output[header.start():end])
        return "".join(parts)

    def tests(self, impl: str, outcomes: tuple[str, ...] = ("FAILED", "ERROR")) -> list[str]:
        return [m.group(2) for m in SUMMARY.finditer(self.output) if m.group(1) in outcomes and self.impl_of(m.group(2)) == impl]

    def clause_status(self, impl: str, clause: str) -> str | None:
        return self.report["outcomes"].get(impl, {}).get("cpu", {}).get(clause) if self.report else None

    def failed_here(self, impl: str) -> list[str]:
        return sorted(c for c, status in self.report["outcomes"].get(impl, {}).get("cpu", {}).items() if status in ("fail", "diverge"))

    def describe(self) -> str:
        return f"run -k {self.selection} over {', '.join(self.impls)}: exit {self.returncode}\n{self.output[-5000:]}"


def start(selection: Selection, impls: tuple[str, ...], report: Path) -> subprocess.Popen:
    specs = [f"caches.adapters:{impl}" if impl in BUILTINS else f"caches.variants:{impl}" for impl in impls]
    keyword = ["-k", selection.keyword] if selection.keyword else []
    command = [sys.executable, "-m", "pytest", "conformance", "-p", "no:cacheprovider", "-q", "-n", "0",
               "--tb=short", "-rfEp", *keyword, "--conformance-report", str(report)]
    for spec in specs:
        command += ["--cache-impl", spec]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # GPU params skip on any machine
    return subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Run]:
    """Every selection's run, by impl (the baseline's entry is a list of runs)."""
    out = tmp_path_factory.mktemp("teeth")
    started = []
    for name, selection in RUNS.items():
        impls = (*selection.variants, *([selection.baseline] if selection.baseline else []))
        report = out / name
        started.append((name, impls, report, start(selection, impls, report)))
    done: list[Run] = []
    try:
        for selection, impls, report, process in started:
            try:
                output, _ = process.communicate(timeout=RUN_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                output, _ = process.communicate()
                raise AssertionError(f"the conformance run -k {selection} did not finish within {RUN_TIMEOUT_S}s:\n{output[-5000:]}")
            json_path = report.with_name(report.name + ".json")
            data = json.loads(json_path.read_text()) if json_path.exists() else None
            done.append(Run(selection, impls, RUNS[selection].baseline, process.returncode, output, data))
    finally:
        for *_, process in started:
            if process.poll() is None:
                process.kill()
                process.communicate()
    return {run.selection: run for run in done}


def named(text: str, clause: str) -> bool:
    # Violations and the tests' assertion messages read "<clause>: ...".
    return re.search(rf"(?<![A-Za-z0-9]){re.escape(clause)}: ", text) is not None


VARIANT_RUNS = [(variant, name) for name, selection in RUNS.items() for variant in selection.variants]


def test_every_variant_is_exercised():
    assert sorted(v for v, _ in VARIANT_RUNS) == sorted(EXPECTED_FAILURES), "every variant in caches.variants needs a run here"


@pytest.mark.parametrize("variant, selection", VARIANT_RUNS, ids=[v for v, _ in VARIANT_RUNS])
def test_variant_fails_naming_its_clauses(runs, variant, selection):
    run = runs[selection]
    assert run.returncode == 1, f"the run must end with test failures (exit 1)\n{run.describe()}"
    assert run.tests(variant), f"no test failed for {variant}\n{run.describe()}"
    text = run.failure_text(variant)
    assert run.report is not None, f"the run wrote no report\n{run.describe()}"
    for clause in EXPECTED_FAILURES[variant]:
        assert named(text, clause), f"{variant}: no failure names clause {clause}\n{run.describe()}"
        status, want = run.clause_status(variant, clause), "diverge" if variant in DIVERGES_BY_DESIGN else "fail"
        assert status == want, f"{variant}: the report's matrix marks {clause} as {status!r} on cpu, not {want!r}"
    if variant in DIVERGES_BY_DESIGN:  # one entry per design, with both sides, and no defect beside it
        found = [(e["verdict"], (e.get("divergence") or {}).get("id")) for e in run.report["defects"]["entries"] if variant in e["implementations"]]
        assert found and set(found) == {("divergence", DIVERGES_BY_DESIGN[variant])}, found


@pytest.mark.parametrize("variant", sorted(ONLY_THESE))
def test_variants_fail_their_clauses_only(runs, variant):
    run = next(r for r in runs.values() if variant in r.impls)
    assert run.failed_here(variant) == sorted(EXPECTED_FAILURES[variant]), (
        f"{variant}: the whole suite must fail {sorted(EXPECTED_FAILURES[variant])} and nothing else; "
        f"failed here: {run.failed_here(variant)}\n{run.describe()}")
    failing = run.report["failing"][variant]["cpu"]
    assert not failing["naming_no_clause"], f"{variant}: failures naming no clause: {failing['naming_no_clause']}"
    if variant in SHAPE_WORDS:  # shaped like upstream's decision code: the report says which shape
        table = run.report["decision_table"][variant]["cpu"]
        assert table["matches"].startswith(SHAPE_WORDS[variant]), table["matches"]


@pytest.mark.parametrize("name", sorted(n for n, s in RUNS.items() if s.baseline))
def test_the_baseline_passes_what_the_variants_fail(runs, name):
    run = runs[name]
    baseline = run.baseline
    assert not run.tests(baseline), f"the real {baseline} failed {run.tests(baseline)}\n{run.describe()}"
    assert run.tests(baseline, ("PASSED",)), f"no test passed for {baseline}\n{run.describe()}"
    cells = run.report["outcomes"].get(baseline, {}).get("cpu", {})
    assert "pass" in cells.values(), f"{baseline} passed no clause in run {name}"
    failing = sorted(c for c, status in cells.items() if status in ("fail", "fail-other"))
    assert not failing, f"{baseline}: the report marks {failing} as failed"


def test_a_rank_local_trip_count_on_one_group_names_the_group_the_rank_and_the_step(runs):
    run = runs["groups"]
    text = run.failure_text("extra_vote_on_one_group")
    line = next((line for line in text.splitlines() if "L3: " in line), "")
    assert "on group attn_tp:2,3" in line and re.search(r"rank 3 vote_max\(op r[12], step 1\)", line), f"L3 line: {line!r}\n{run.describe()}"
    stuck = re.search(r"no progress for ([0-9.]+)s", text)
    assert stuck and float(stuck.group(1)) < 10, f"the hang must be reported within seconds\n{run.describe()}"
