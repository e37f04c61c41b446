"""A tiny campaign end to end, the figures, and bad input as one line."""

from __future__ import annotations

import json

import pytest

from conformance.mutants.campaign import ImplPlan, ImplRun, MutantResult
from conformance.mutants.catalogue import Mutant
from conformance.mutants.cli import main
from conformance.mutants.runner import KILLED, STILLBORN, SURVIVED, TIMEOUT, RunOutcome
from conformance.mutants.summary import figure_lines, figures, mutant_line, summary_lines

HIRADIX = "caches.adapters:hiradix"
# A few decision tests: they kill a removed extra-pool guard (D3) and let a swapped one-rank reduce through.
TESTS = "test_every_decision_state and wait_complete"
# These tests judge naming and equivalence, not speed: a bound this wide still catches a hung mutant run, and a
# CI machine whose other worker is busy (its baseline of ~10 s became > 60 s per mutant) no longer turns a
# survivor into a timeout.
PER_MUTANT_S = "600"


def listed_ids(capsys, *select: str) -> list[str]:
    args = ["--cache-impl", HIRADIX, "--list"] + [a for s in select for a in ("--select", s)]
    assert main(args) == 0
    return [line.split()[0] for line in capsys.readouterr().out.splitlines() if not line.startswith("==")]


def test_a_campaign_kills_the_guard_removal_and_names_its_clause(tmp_path, capsys):
    guard, reduce = listed_ids(capsys, "caches/hiradix.py:*:remove_assign_guard", "caches/hiradix.py:*:reduce_swap")
    report = tmp_path / "out" / "mutants.json"
    code = main(["--cache-impl", HIRADIX, "--select", guard, "--select", reduce, "-k", TESTS, "--jobs", "1",
                 "--timeout", PER_MUTANT_S, "--equivalent", f"{reduce}=one rank: the reduce is the identity in these tests", "--report", str(report)])
    out = capsys.readouterr().out
    assert code == 0, out  # the one survivor is argued equivalent
    assert f"{guard}  killed by conformance/suite/test_decision.py::test_every_decision_state[hiradix-cpu-wait_complete] naming D3" in out
    assert f"{reduce}  SURVIVED, argued equivalent" in out
    assert "because: one rank: the reduce is the identity in these tests" in out
    assert "kill rate: 1/1 non-equivalent (100.0%)" in out
    assert "clause named: 1/1 kills name the clause the mutant breaks (100.0%)" in out
    data = json.loads(report.read_text(encoding="utf-8"))
    by_id = {m["id"]: m for m in data["implementations"][0]["mutants"]}
    assert by_id[guard]["status"] == "killed" and by_id[guard]["clauses"] == ["D3"] and by_id[guard]["names_expected"]
    assert by_id[guard]["applied_in_processes"] >= 1  # the xdist worker executed the mutated module
    assert by_id[reduce]["status"] == "survived" and by_id[reduce]["applied_in_processes"] >= 1
    assert data["figures"]["kill_rate"] == 100.0


def test_a_suite_failing_unmutated_is_one_error_line(capsys):
    code = main(["--cache-impl", "caches.variants:guard_missing", "--select", "caches/core/commit.py:*:reduce_swap",
                 "-k", TESTS, "--jobs", "0"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "the suite fails on the unmutated guard_missing" in err and "D3" in err


@pytest.mark.parametrize("args, says", [
    (["--cache-impl", "no_such_package.adapters:factory"], "invalid --cache-impl: 'no_such_package.adapters:factory'"),
    (["--cache-impl", "caches.adapters"], "invalid --cache-impl: 'caches.adapters'"),
    (["--cache-impl", HIRADIX, "--select", "caches/hiradix.py:9999:drop_lock"], "invalid --select: 'caches/hiradix.py:9999:drop_lock'"),
    (["--cache-impl", HIRADIX, "--equivalent", "no reason given"], "invalid --equivalent: 'no reason given' (accepted: ID=REASON"),
    (["--cache-impl", HIRADIX, "--equivalent", "caches/hiradix.py:9999:drop_lock=because"], "the id of a generated mutant"),
    (["--cache-impl", HIRADIX, "--breaks-no-clause", "caches/hiradix.py:9999:drop_lock"], "invalid --breaks-no-clause: 'caches/hiradix.py:9999:drop_lock' (accepted: ID=REASON"),
    (["--cache-impl", HIRADIX, "--breaks-no-clause", "caches/hiradix.py:9999:drop_lock=because"], "invalid --breaks-no-clause: 'caches/hiradix.py:9999:drop_lock'"),
    (["--cache-impl", HIRADIX, "--equivalent", "x=a", "--breaks-no-clause", "x=b"], "a mutant not also argued equivalent"),
    (["--cache-impl", HIRADIX, "--limit", "0"], "invalid --limit: 0"),
    (["--cache-impl", HIRADIX, "--jobs", "many"], "invalid --jobs: 'many'"),
    (["--cache-impl", HIRADIX, "--timeout", "-5"], "invalid --timeout: -5.0"),
])
def test_bad_input_is_one_line(capsys, args, says):
    assert main(args) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and says in captured.err, captured.err


def test_a_report_that_cannot_be_written_is_one_line_before_anything_runs(tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("", encoding="utf-8")
    assert main(["--cache-impl", HIRADIX, "--report", str(blocker / "report.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "invalid --report" in err


def test_an_unknown_option_is_one_line(capsys):
    with pytest.raises(SystemExit) as caught:
        main(["--cache-impl", HIRADIX, "--no-such-option"])
    assert caught.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1


def result(status: str, *, clauses=(), expected=("F3",), equivalent=None, no_clause=None) -> MutantResult:
    mutant = Mutant(id=f"m.py:1:{status}", path="m.py", file="m.py", module="m", line=1, operator="min_max_swap", function="f",
                    role="commit", description="", expected=expected, diff="", source="")
    return MutantResult("impl", mutant, RunOutcome(status, 1.0, test="t" if status == KILLED else None, clauses=clauses, applied_in=1), equivalent, no_clause)


def test_figures_count_timeouts_as_kills_and_leave_out_stillborn_and_equivalent_survivors():
    results = [result(KILLED, clauses=("F3",)), result(KILLED, clauses=("D5",)), result(TIMEOUT), result(SURVIVED),
               result(SURVIVED, equivalent="why"), result(STILLBORN), result(KILLED, clauses=("F3",), equivalent="wrong")]
    f = figures(results)
    assert (f["kills"], f["non_equivalent"], f["clause_named"], f["equivalent"], f["stillborn"]) == (4, 5, 2, 1, 1)
    assert figure_lines(f) == ["kill rate: 4/5 non-equivalent (80.0%)", "clause named: 2/4 kills name the clause the mutant breaks (50.0%)"]


def test_figures_of_nothing_say_so():
    assert figure_lines(figures([])) == ["kill rate: 0/0 non-equivalent (n/a)", "clause named: 0/0 kills name the clause the mutant breaks (n/a)"]


def test_a_mutant_argued_to_break_no_clause_is_named_right_only_by_a_kill_naming_none():
    argued = "the device tier stops admitting: nothing is exposed, freed twice or lost that was promised"
    results = [result(KILLED, no_clause=argued), result(KILLED, clauses=("S5",), no_clause=argued), result(TIMEOUT, no_clause=argued),
               result(KILLED)]  # without the argument, a kill naming none is off
    assert [r.names_expected for r in results] == [True, False, False, False]
    f = figures(results)
    assert (f["kills"], f["clause_named"]) == (4, 1)
    lines = summary_lines([ImplRun(ImplPlan("m:f", "impl", (), 4, 1), 1.0, 60.0, results)])
    assert f"    because: {argued}" in lines
    assert "  m.py:1:killed  expected no clause (argued), named S5 (t: )" in lines  # the argument is wrong: listed off
    assert "impl  m.py:1:killed  killed by t naming no clause, argued to break none" == mutant_line(results[0])
