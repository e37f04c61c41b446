import subprocess
import sys

import pytest

from spec import CATALOGUE, WINDOWS, clause, doc
from spec.clauses import CHECKER_CLAUSES, GROUPS, Stance
from spec.invariants import CHECKERS


def test_generated_doc_is_in_sync():
    assert not doc.is_stale(), "spec/SPEC.md is stale: run `python -m spec doc --write`"


def test_doc_states_every_clause_and_window():
    text = doc.render()
    for c in CATALOGUE.values():
        assert f"#### {c.id}. {c.title}" in text
    for w in WINDOWS:
        assert f"| {w.id} |" in text


def test_stale_doc_is_detected(tmp_path):
    path = tmp_path / "SPEC.md"
    path.write_text(doc.render().replace("F3", "F33", 1), encoding="utf-8")
    assert doc.is_stale(path)
    doc.write(path)
    assert not doc.is_stale(path)


def test_catalogue_is_well_formed():
    for c in CATALOGUE.values():
        assert c.group in GROUPS and c.id.startswith(c.group)
        assert c.statement and c.rationale and c.upstream


def test_every_checker_and_window_cites_known_clauses():
    for name in CHECKERS:
        for cid in CHECKER_CLAUSES.get(name, (name,)):
            assert cid in CATALOGUE
    for w in WINDOWS:
        assert w.closed_by and all(cid in CATALOGUE for cid in w.closed_by)
    # The five upstream windows and the four failure classes from the brief are all there.
    assert [w.id for w in WINDOWS] == ["W1", "W2", "W3", "W4", "W5", "P6", "P7", "P8", "P9"]


def test_unknown_clause_lookup():
    with pytest.raises(ValueError, match="invalid clause: 'Z9'"):
        clause("Z9")


def run_spec(*args):
    return subprocess.run([sys.executable, "-m", "spec", *args], capture_output=True, text=True, timeout=60)


def test_cli_prints_the_decision_table():
    out = run_spec()
    assert out.returncode == 0
    lines = out.stdout.splitlines()
    assert lines[0].split()[:2] == ["policy", "hit"]
    assert len(lines) == 2 + 144
    assert any(line.startswith("wait_complete") and "pending" in line and " D3 " in line for line in lines)


def test_cli_doc_check_and_bad_arguments():
    assert run_spec("doc", "--check").returncode == 0
    bad = run_spec("table", "--page-size", "0")
    assert bad.returncode == 2 and "invalid --page-size: 0" in bad.stderr and "Traceback" not in bad.stderr
    assert run_spec("nonsense").returncode == 2


def test_every_upstream_note_carries_its_evidence():
    for c in CATALOGUE.values():
        assert c.evidence and all(e.strip() for e in c.evidence), f"{c.id}: an upstream note needs its evidence"
        assert all(r in CATALOGUE and r != c.id for r in c.requires), f"{c.id}: requires unknown clauses {c.requires}"


def test_d3_is_a_correction_that_needs_the_fence():
    d3 = clause("D3")
    assert d3.stance is Stance.CORRECTS
    assert set(d3.requires) >= {"F1", "F3", "F5"}, "D3 is safe only with terminate stopping IO, the commit clamp and the in-flight free rule"
    for ref in ("#27550", "#35012", "#35181", "#31668"):
        assert any(ref in e for e in d3.evidence), f"D3 evidence lacks {ref}"
    for cid in ("D5", "L2"):
        c = clause(cid)
        assert c.stance is Stance.CORRECTS and "pending" in c.upstream, f"{cid} must say what upstream does instead"


def test_io_bound_clause_exists_and_liveness_leans_on_it():
    l4 = clause("L4")
    assert "bound" in l4.statement and set(l4.requires) == {"F3", "F5"}
    assert "L4" in clause("L1").requires


def test_doc_shows_requirements_evidence_and_anchors():
    text = doc.render()
    assert '<a id="d3"></a>' in text  # lint's SARIF helpUri links here
    assert "- Requires: F1, F3, F4, F5" in text
    assert "- Evidence: PR #26881" in text
    assert "## Where upstream's decision differs" in text


def test_cli_prints_one_clause():
    out = run_spec("clause", "d5")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("D5. timeout votes completion or timed out")
    assert "Upstream (corrects):" in out.stdout and "Evidence:" in out.stdout and "#35012" in out.stdout
    bad = run_spec("clause", "Z9")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "invalid clause: 'Z9'" in bad.stderr
