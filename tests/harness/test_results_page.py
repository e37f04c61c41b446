"""Results pages (python -m conformance.report.results): what a docs/results/ page says is what the report holds."""

from __future__ import annotations

import json
from types import SimpleNamespace

from conformance.report.matrix import OutcomeRecord
from conformance.report.results import main, outcome_totals, render, verdict_summary


def test_each_implementation_lists_exactly_its_defect_and_hardening_cells(live_shaped_report):
    data = live_shaped_report()
    page = render(data, "Fork")
    for impl in data["matrix"]:
        row = data["matrix"][impl]["cpu"]
        defects = [c for c, v in row.items() if v == "defect"]
        hardening = [c for c, v in row.items() if v == "hardening"]
        assert defects or hardening, "the sample must fail somewhere, or this test checks nothing"
        expected = f"defects: {', '.join(defects) or 'none'}; hardening not met: {', '.join(hardening) or 'none'}"
        section = page.split(f"## {impl}\n", 1)[1].split("\n## ", 1)[0]
        assert expected in section.splitlines()


def test_the_page_counts_tests_as_pytest_does(live_shaped_report):
    data = live_shaped_report()
    failed = sum(1 for t in data["tests"] if t["outcome"] == "fail")
    passed = sum(1 for t in data["tests"] if t["outcome"] == "pass")
    assert failed and passed
    assert outcome_totals(data) == f"{failed} failed, {passed} passed"
    assert f"- tests: {failed} failed, {passed} passed" in render(data).splitlines()


def test_a_clean_row_says_none():
    assert verdict_summary({"D3": "pass", "S6": "not-judged"}) == "defects: none; hardening not met: none"


def test_one_count_is_singular(live_shaped_report):
    data = live_shaped_report()
    impl = next(iter(data["matrix"]))
    data["matrix"][impl]["cpu"] = {"D3": "defect", "S6": "pass"}
    assert "1 defect, 0 hardening not met" in render(data)


def test_the_command_writes_the_page(live_shaped_report, tmp_path, capsys):
    report = tmp_path / "run.json"
    report.write_text(json.dumps(live_shaped_report()), encoding="utf-8")
    page = tmp_path / "pages" / "fork.md"
    assert main([str(report), "--output", str(page), "--title", "Fork"]) == 0
    assert page.read_text(encoding="utf-8").startswith("# Fork\n")
    assert capsys.readouterr().out.strip() == f"wrote {page}"


def test_bad_reports_are_one_line_each(tmp_path, capsys):
    missing = tmp_path / "none.json"
    not_json = tmp_path / "bad.json"
    not_json.write_text("{", encoding="utf-8")
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"schema_version": 1}), encoding="utf-8")
    for path, says in ((missing, "readable JSON report"), (not_json, "JSON written by --conformance-report"), (old, "schema_version: 1 (accepted: 2)")):
        assert main([str(path), "--output", str(tmp_path / "out.md")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and says in err, err
    assert not (tmp_path / "out.md").exists()


def _phase(when: str, outcome: str) -> SimpleNamespace:
    return SimpleNamespace(when=when, failed=outcome == "failed", skipped=outcome == "skipped", passed=outcome == "passed", user_properties=[])


def test_a_teardown_error_counts_as_pytest_counts_it():
    """A passed call whose teardown fails is one passed and one error for pytest, a failure for the verdict."""
    passed_then_error = OutcomeRecord("t::a[x-cpu]", "x", "cpu", ["S1"])
    for when, outcome in (("setup", "passed"), ("call", "passed"), ("teardown", "failed")):
        passed_then_error.add(_phase(when, outcome))
    setup_error = OutcomeRecord("t::b[x-cpu]", "x", "cpu", ["S1"])
    for when, outcome in (("setup", "failed"), ("teardown", "passed")):
        setup_error.add(_phase(when, outcome))
    failed = OutcomeRecord("t::c[x-cpu]", "x", "cpu", ["S1"])
    for when, outcome in (("setup", "passed"), ("call", "failed"), ("teardown", "failed")):
        failed.add(_phase(when, outcome))
    records = [passed_then_error, setup_error, failed]
    assert [r.outcome for r in records] == ["fail", "fail", "fail"]
    assert outcome_totals({"tests": [r.as_json() for r in records]}) == "1 failed, 1 passed, 3 errors"


def test_the_command_names_a_tree_as_tree_not_the_run_machines_path(live_shaped_report):
    data = live_shaped_report()
    data["run"]["pytest_args"] = ["conformance/", "-n", "2", "--sglang-live", "/home/ci/work/sglang-fork@9e9fde147", "-k", "sglang",
                                  "--sglang=/tmp/other", "--conformance-report", "out/fork"]
    first = render(data).splitlines()[4]
    assert first == "- command: `pytest conformance/ -n 2 --sglang-live TREE@9e9fde147 -k sglang --sglang=TREE --conformance-report out/fork`"


def test_a_suite_whose_version_is_unknown_says_so(live_shaped_report):
    data = live_shaped_report()
    data["suite"] = {**data["suite"], "version": None}
    line = next(line for line in render(data).splitlines() if line.startswith("- suite: "))
    assert line.startswith("- suite: hicache-conformance (version unknown), commit "), line


def test_a_suite_run_from_its_checkout_reads_the_version_the_checkout_declares(tmp_path):
    from conformance.plugin.identity import source_version

    (tmp_path / "conformance").mkdir()
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "hicache-conformance"\nversion = "9.8.7"\n')
    assert source_version(tmp_path / "conformance") == "9.8.7"
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "someone-else"\nversion = "1.0"\n')
    assert source_version(tmp_path / "conformance") is None, "another project's pyproject.toml is not this suite's version"


def test_an_entry_says_where_upstream_did_it_from_the_tree_down_never_the_run_machines_path(live_shaped_report):
    data = live_shaped_report()
    data["run"]["pytest_args"] = ["conformance/", "--sglang", "fork", "-k", "sglang"]
    data["run"]["directory"] = "/home/ci/work"
    entry = data["defects"]["entries"][0]
    impl = entry["implementations"][0]
    site = "sglang/srt/mem_cache/hiradix_cache.py:1356 (can_terminate_prefetch) < caches/hiradix.py:90 (check_prefetch_progress)"
    entry["sites"] = {impl: [site]}
    data["declarations"] = {impl: {"profile": "vote_per_check", "profile_title": "vote per check", "profile_declared": True,
                                   "profile_evidence": ["/home/ci/work/fork/python/sglang/srt/mem_cache/hiradix_cache.py:1324: votes"]}}
    page = render(data)
    section = page.split(f"## {impl}\n", 1)[1].split("\n## ", 1)[0]
    cell = next(line for line in section.splitlines() if line.startswith(f"- **{entry['clause']}** "))
    assert section.splitlines()[section.splitlines().index(cell) + 1] == f"  - where: `{site}`"
    assert "  - TREE/python/sglang/srt/mem_cache/hiradix_cache.py:1324: votes" in section.splitlines()
    assert "/home/ci" not in page
