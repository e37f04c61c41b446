"""Reproduction scripts (conformance/repro/): standalone caches, shrinking, and scripts that reproduce a variant's defect.

The end-to-end test runs the suite as a user does on two known-bad variants
(caches.variants) with --conformance-repro, then runs every script it wrote
alone, from another directory: each must exit 1 naming its clause, and 0
when pointed at the real cache the variant derives from.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from conformance.scenarios.catalogue import SCENARIOS

from conformance.scenarios.explore import parse_schedule, replay
from conformance.repro.cases import cases_for, why_none
from conformance.repro.runtime import GONE, NOT_BUILT, REPRODUCED, main
from conformance.repro.shrink import candidates, shrink, size
from conformance.repro.standalone import CacheFactory, load_adapter
from spec.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
SCENARIO = SCENARIOS["wait_complete/3batches+abort"]
LONG_FAILING = "check,io,check,io,io,check,io"  # guard_missing votes yes with the indexer get pending at its last check


def test_candidates_leave_out_first_then_replace_then_cut():
    found = list(candidates(("io", "check", "io")))
    assert found[:3] == [("check", "io"), ("io", "io"), ("io", "check")]
    assert ("io", "io", "io") in found and found[-1] == ("io",) and len(found) == len(set(found))


def test_shrinking_finds_a_smaller_schedule_that_still_breaks_the_clause():
    adapter = load_adapter(cache_impl="caches.variants:guard_missing")
    found = shrink(adapter, SCENARIO, LONG_FAILING, "D3")
    assert found is not None and size(parse_schedule(found.schedule)) < size(parse_schedule(LONG_FAILING))
    with CacheFactory(adapter) as make_cache, pytest.raises(AssertionError, match="D3: "):
        replay(make_cache, SCENARIO, found.schedule, profile=make_cache.profile)


def test_a_schedule_that_passes_is_not_shrunk():
    assert shrink(load_adapter(cache_impl="caches.adapters:hiradix"), SCENARIO, LONG_FAILING, "D3") is None


@pytest.mark.parametrize("given, field", [({}, "implementation"), ({"cache_impl": "a:b", "sglang": "/x"}, "implementation"),
                                          ({"cache_impl": "no_such_module:factory"}, "--cache-impl")])
def test_a_bad_implementation_is_one_line_naming_the_field(given, field):
    with pytest.raises(ConfigError) as info:
        load_adapter(**given)
    assert str(info.value).startswith(f"invalid {field}: ") and "\n" not in str(info.value)


def test_a_script_exits_1_when_its_clause_fails_0_when_it_passes_2_when_unbuilt(capsys):
    def breaks(make_cache):
        raise AssertionError("S3: freed while IO 7 is in flight")

    target = {"cache_impl": "caches.adapters:hiradix"}
    assert main("S3", [("hiradix", target, breaks)], []) == REPRODUCED
    assert main("S3", [("hiradix", target, lambda make_cache: make_cache())], []) == GONE
    assert main("S3", [("hiradix", target, breaks)], ["--cache-impl", "nowhere:factory"]) == NOT_BUILT
    out, err = capsys.readouterr()
    assert "REPRODUCED S3 (safety" in out and "did not reproduce: the replay passed" in out and len(err.strip().splitlines()) == 1


def test_an_entry_without_a_standalone_case_says_why():
    entry = {"clause": "C2", "also": [], "implementations": ["x"], "thread": None, "schedules": [],
             "tests": [{"nodeid": "conformance/suite/test_config.py::test_bad_numeric_field_is_rejected[x-page_size-0]", "impl": "x"}]}
    data = {"implementations": [{"name": "x", "factory": "pkg:x", "source": "--cache-impl"}], "tests": [], "decision_table": {}}
    assert cases_for(entry, data) == {} and "test_bad_numeric_field_is_rejected" in why_none(entry)


@pytest.mark.slow  # a suite run and a Python process per script
def test_scripts_reproduce_a_variants_defect_alone_and_pass_on_its_base(tmp_path):
    report, folder = tmp_path / "report", tmp_path / "repro"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "conformance", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
         "--cache-impl", "caches.variants:guard_missing", "--cache-impl", "caches.variants:guard_on_vote",
         "-k", "test_every_decision_state or test_every_interleaving and (wait_complete/3batches or timeout/2batches+tick)",
         "--conformance-report", str(report), "--conformance-repro", str(folder)],
        cwd=REPO, capture_output=True, text=True, timeout=600, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert run.returncode == 1, run.stdout[-2000:] + run.stderr[-2000:]
    data = json.loads(report.with_suffix(".json").read_text())
    schema = json.loads((REPO / "conformance" / "report" / "schema.json").read_text())
    assert not [e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(data)]
    # The decision table's entries: guard_missing's D3, guard_on_vote's D5 (a defect: it forces the vote even before KV has
    # landed, beyond upstream's design, which holds only a landed wait).
    entries = {e["clause"]: e for e in data["defects"]["entries"] if any("test_every_decision_state" in t["nodeid"] for t in e["tests"])}
    assert {"D3", "D5"} <= set(entries), sorted(entries)
    assert (entries["D3"]["verdict"], entries["D5"]["verdict"]) == ("defect", "defect"), entries
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": ""}
    for clause in ("D3", "D5"):
        repro = entries[clause]["repro"]
        assert all(t["status"] == "reproduces" for t in repro["targets"].values()), repro
        script = Path(repro["path"])
        alone = subprocess.run([sys.executable, str(script)], cwd=elsewhere, capture_output=True, text=True, timeout=120, env=env)
        assert alone.returncode == 1 and f"REPRODUCED {clause} " in alone.stdout, alone.stdout + alone.stderr
        base = subprocess.run([sys.executable, str(script), "--cache-impl", "caches.adapters:hiradix"], cwd=elsewhere,
                              capture_output=True, text=True, timeout=120, env=env)
        assert base.returncode == 0 and "did not reproduce" in base.stdout, base.stdout + base.stderr


def _entry(clause: str, impl: str, line: str, nodeid: str) -> tuple[dict, dict]:
    entry = {"id": clause, "clause": clause, "kind": "safety", "title": "t", "sentence": "s", "also": [], "implementations": [impl],
             "thread": "backup_thread" if clause == "L5" else None, "schedules": [], "tests": [{"nodeid": nodeid, "impl": impl}]}
    data = {"implementations": [{"name": impl, "factory": f"caches.adapters:{impl}", "source": "--cache-impl"}], "decision_table": {},
            "tests": [{"nodeid": nodeid, "impl": impl, "outcome": "fail", "weak": None, "failed_clauses": {clause: line},
                       "causes": [{"clause": clause, "line": line}]}]}
    return entry, data


@pytest.mark.parametrize("clause, line, kind", [
    ("L5", "L5: upstream's backup_thread ended on InjectedFault: rank 1: injected fault 'x' at #23 io_start rank 1 pool kv space host "
           "io 5 slots [8] value 'host_to_storage'", "storage_error"),
    ("L5", "L5: upstream's prefetch_io_aux_thread ended on InjectedFault: injected fault 'y' at #21 io_start rank 0 op f pool kv space host "
           "io 4 slots [16] value 'storage_to_host'", "storage_error"),
    ("S6", "S6: a cache whose KV pages differ from the writer's only in layout ({'kv': ...}) served 16 tokens", "foreign_pages"),
])
def test_fault_and_foreign_page_scripts_run_and_pass_on_a_sound_cache(tmp_path, clause, line, kind):
    from conformance.repro.script import render
    from conformance.repro.writer import check_script

    entry, data = _entry(clause, "hiradix", line, "t.py::test_x[hiradix]")
    cases = cases_for(entry, data)
    assert [c.kind for c in cases.values()] == [kind]
    script = tmp_path / "repro.py"
    script.write_text(render(entry, cases, {"hiradix": {"cache_impl": "caches.adapters:hiradix"}}, {}, script.name))
    assert check_script(script, clause)["hiradix"]["status"] == "gone"
