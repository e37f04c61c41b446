"""python -m conformance.sweep: reports of several targets merged into one page, on hand-written reports (no upstream run)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from conformance import sweep
from spec.clauses import CATALOGUE


def report(path: Path, label: str, rows: dict[str, dict[str, str]]) -> Path:
    """A report as --conformance-report writes it, reduced to what the sweep reads: each live row's cpu verdicts."""
    matrix = {f"sglang-live:{row}@{label}": {"cpu": {c: verdicts.get(c, "pass") for c in CATALOGUE}} for row, verdicts in rows.items()}
    matrix["hiradix"] = {"cpu": {c: "pass" for c in CATALOGUE}}  # one of ours in the same run: not a target's row
    path.write_text(json.dumps({"matrix": matrix, "not_run": []}))
    return path


def test_a_defect_is_shown_where_it_appears_and_from_where_it_passes_again(tmp_path):
    a = report(tmp_path / "a.json", "0.5.19", {"HiRadixCache": {"F3": "defect", "C2": "hardening"}})
    b = report(tmp_path / "b.json", "0.5.20", {"HiRadixCache": {"C2": "hardening"}, "HiRadixCache+dsa": {"L1": "defect"}})
    assert sweep.main(["merge", str(a), str(b), "--output", str(tmp_path / "sweep.md")]) == 0
    page = (tmp_path / "sweep.md").read_text()
    assert "targets, in order: 0.5.19, 0.5.20" in page
    assert "- **F3** (defect): broken on 0.5.19; passes again from 0.5.20" in page
    assert "- **C2** (hardening): broken on 0.5.19, 0.5.20\n" in page
    assert "| 0.5.19 (not run) |" in page.split("## HiRadixCache+dsa")[1], "a row the older target does not run is marked, not left out"
    assert "## hiradix" not in page, "only the targets' rows"


def test_input_that_is_not_a_live_report_is_one_line_and_exit_2(tmp_path, capsys):
    garbage = tmp_path / "x.json"
    garbage.write_text("not json")
    ours = tmp_path / "ours.json"
    ours.write_text(json.dumps({"matrix": {"hiradix": {"cpu": {}}}}))
    for bad, fragment in ((garbage, "a JSON report written by --conformance-report"), (ours, "the report of a --sglang-live run")):
        assert sweep.main(["merge", str(bad), "--output", str(tmp_path / "p.md")]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and fragment in err and str(bad) in err, err
    assert not (tmp_path / "p.md").exists()


def test_run_calls_the_suite_once_per_target_and_names_a_target_that_left_no_report(tmp_path, capsys):
    fake = tmp_path / "fake_python.py"  # stands in for SGLang's interpreter: writes a report for one target only
    fake.write_text("import sys, pathlib, json\n"
                    "args = sys.argv[1:]\n"
                    "out = pathlib.Path(args[args.index('--conformance-report') + 1])\n"
                    "tree = args[args.index('--sglang-live') + 1]\n"
                    "if tree.endswith('@0.5.23'):\n"
                    "    out.with_name(out.name + '.json').write_text(json.dumps({'matrix': {}}))\n"  # as write_report names it
                    "    print('1 passed')\n"
                    "else:\n"
                    "    print('ERROR: --sglang-live: not a tree', file=sys.stderr)\n")
    launcher = tmp_path / "python"
    launcher.write_text(f"#!/bin/sh\nshift 2\nexec {sys.executable} {fake} \"$@\"\n")  # drop '-m pytest'
    launcher.chmod(0o755)
    code = sweep.run(["/t/one@0.5.23", "/t/two@bad"], tmp_path / "out", str(launcher))  # a label with dots, as releases have
    out = capsys.readouterr().out
    assert code == 1
    assert (tmp_path / "out" / "0.5.23.json").is_file() and not (tmp_path / "out" / "bad.json").exists()
    assert "sweep: /t/one@0.5.23: 1 passed" in out and "sweep: /t/two@bad: no report (ERROR: --sglang-live: not a tree)" in out, out


def test_check_passes_the_recorded_verdicts_and_names_each_row_that_moved(tmp_path, capsys):
    a = report(tmp_path / "a.json", "0.5.20", {"HiRadixCache": {"S6": "defect", "C2": "hardening"}, "HiRadixCache+dsa": {"L1": "defect"}})
    expect = tmp_path / "expect.json"
    expect.write_text(json.dumps({"HiRadixCache@0.5.20": {"defect": ["S6"], "hardening": ["C2"]},
                                  "HiRadixCache+dsa@0.5.20": {"defect": ["L1"]}}))
    assert sweep.main(["check", str(a), "--expect", str(expect)]) == 0
    assert "2 row(s) as recorded" in capsys.readouterr().out
    expect.write_text(json.dumps({"HiRadixCache@0.5.20": {"defect": ["S6", "F3"], "hardening": ["C2"]},
                                  "UnifiedRadixCache@0.5.23": {"defect": []}}))
    assert sweep.main(["check", str(a), "--expect", str(expect)]) == 1
    out = capsys.readouterr().out
    assert "HiRadixCache@0.5.20: recorded" in out and "'defect': ['S6']" in out
    assert "UnifiedRadixCache@0.5.23: expected in the runs, not run" in out
    assert "HiRadixCache+dsa@0.5.20: ran, but has no recorded verdicts" in out


def test_record_writes_what_check_then_passes(tmp_path, capsys):
    a = report(tmp_path / "a.json", "0.5.20", {"HiRadixCache": {"S6": "defect", "C2": "hardening", "D5": "divergence"}})
    expect = tmp_path / "expect.json"
    assert sweep.main(["record", str(a), "--output", str(expect)]) == 0
    assert json.loads(expect.read_text()) == {"HiRadixCache@0.5.20": {"defect": ["S6"], "hardening": ["C2"]}}
    assert sweep.main(["check", str(a), "--expect", str(expect)]) == 0
    assert "1 row(s) as recorded" in capsys.readouterr().out.splitlines()[-1]


def test_a_test_whose_failed_clauses_change_is_listed_where_other_tests_keep_its_clause_broken(tmp_path):
    def with_tests(path: Path, label: str, drop_failures: tuple[str, ...]) -> Path:
        report(path, label, {"HiRadixCache": {"S2": "hardening", "F8": "defect" if "F8" in drop_failures else "pass"}})
        data = json.loads(path.read_text())
        impl = f"sglang-live:HiRadixCache@{label}"
        data["tests"] = [
            {"nodeid": f"conformance/suite/test_fence.py::test_drop[{impl}-preempt-cpu]", "impl": impl, "device": "cpu",
             "outcome": "fail" if drop_failures else "pass", "failed_clauses": {c: f"{c}: ..." for c in drop_failures}},
            {"nodeid": f"conformance/suite/test_fence.py::test_other[{impl}-cpu]", "impl": impl, "device": "cpu",
             "outcome": "fail", "failed_clauses": {"S2": "S2: ..."}},  # keeps the row's S2 cell broken on every target
        ]
        path.write_text(json.dumps(data))
        return path

    paths = [with_tests(tmp_path / "a.json", "c~1", ("S2", "F8")), with_tests(tmp_path / "b.json", "c", ("F8",)),
             with_tests(tmp_path / "c.json", "d", ())]
    assert sweep.main(["merge", *map(str, paths), "--output", str(tmp_path / "sweep.md")]) == 0
    page = (tmp_path / "sweep.md").read_text()
    assert "- **S2** (hardening): broken on c~1, c, d\n" in page, "the cell alone shows no change"
    assert "- `test_fence.py::test_drop[HiRadixCache-preempt-cpu]`: c~1 F8, S2; c F8; d pass" in page, page
    assert "test_other" not in page, "a test failing the same clauses on every target is not a change"
