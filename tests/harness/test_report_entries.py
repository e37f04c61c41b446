"""Defect entries agree with the matrix: a clause the matrix calls not applicable to an implementation gets no entry there."""

from __future__ import annotations

from conformance.report.defects import defects_of

F2_LINE = "F2: r1's vote at step 1 is True, but the snapshot it recorded votes False"


def failed(nodeid: str, impl: str, line: str) -> dict:
    return {"nodeid": nodeid, "impl": impl, "device": "cpu", "outcome": "fail", "weak": None,
            "failed_clauses": {line.split(":")[0]: line}, "causes": None}


def test_a_mechanism_of_another_profile_than_the_declared_one_is_no_entry():
    data = {"tests": [failed("t.py::snapshot[fork]", "fork", F2_LINE), failed("t.py::snapshot[ours]", "ours", F2_LINE)],
            "implementations": [], "declarations": {"fork": {"profile": "vote_per_check"}, "ours": {"profile": "fenced_vote"}}}
    defects = defects_of(data)
    assert [(e["id"], e["implementations"]) for e in defects["entries"]] == [("F2", ["ours"])]
    assert defects["naming_no_clause"] == [], "the fork's test named a clause: it is not one that named none"
