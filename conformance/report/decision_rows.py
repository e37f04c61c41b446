"""The decision-table rows where an implementation disagrees with the spec, for the report.

test_decision.py's table test places every state of the spec's decision
table in a real operation; each row where the vote the implementation
recorded, or the decision it returned, differs from the spec's travels in the
test report (a user property, so xdist's controller sees it too). The report
lists them per implementation and says which upstream guard shape
(spec/upstream.py) deviates in exactly those rows.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Mapping, Sequence

from spec.config import Policy
from spec.decision import DecisionState
from spec.profiles import VOTE_PROFILES
from spec.upstream import SHAPE_SUMMARY, matching_shapes

PROP_DECISION_ROWS = "conformance.report.decision_rows"
STATE_FIELDS = ("policy", "page_size", "hit_pages", "completed_tokens", "timed_out", "pool_transfers_present", "pool_transfers_done", "terminated")
SPEC_MATCH = "matches this spec's decision table"


def state_json(state: DecisionState) -> dict[str, Any]:
    return {name: (getattr(state, name).value if name == "policy" else getattr(state, name)) for name in STATE_FIELDS}


def row(state: DecisionState, *, where: str, clause: str, expected_vote: bool, got_vote: bool | None,
        expected_decision: bool, got_decision: bool) -> dict[str, Any]:
    return {"state": state_json(state), "where": where, "clause": clause, "expected_vote": expected_vote,
            "got_vote": got_vote, "expected_decision": expected_decision, "got_decision": got_decision}


def rows_property(policy: str, rows: Sequence[Mapping[str, Any]], profile: str | None = None) -> tuple[str, str]:
    """The user property of one table test: the policy it checked, the profile it was judged by and its disagreeing rows (maybe none)."""
    return (PROP_DECISION_ROWS, json.dumps({"policy": policy, "profile": profile, "rows": list(rows)}))


def read_rows(user_properties: Iterable[Any]) -> dict[str, Any] | None:
    for pair in user_properties:
        if len(pair) == 2 and pair[0] == PROP_DECISION_ROWS:
            return json.loads(pair[1])
    return None


def _yes(flag: bool | None, yes: str, no: str) -> str:
    return "none recorded" if flag is None else (yes if flag else no)


def describe_state(state: Mapping[str, Any]) -> str:
    full = state["hit_pages"] * state["page_size"]
    kv = "none" if state["completed_tokens"] == 0 else ("complete" if state["completed_tokens"] == full else "partial")
    pools = "absent" if not state["pool_transfers_present"] else ("done" if state["pool_transfers_done"] else "pending")
    return (f"{state['policy']}, hit {state['hit_pages']} pages, KV {kv} ({state['completed_tokens']} tokens), "
            f"{'timed out' if state['timed_out'] else 'not timed out'}, pool transfers {pools}, "
            f"{'terminated' if state['terminated'] else 'not terminated'}")


def describe_row(r: Mapping[str, Any]) -> str:
    expected = f"vote {_yes(r['expected_vote'], 'yes', 'no')}, {_yes(r['expected_decision'], 'terminate', 'wait')}"
    got = f"vote {_yes(r['got_vote'], 'yes', 'no')}, {_yes(r['got_decision'], 'terminate', 'wait')}"
    return f"{r['clause']}: {describe_state(r['state'])} ({r['where']}): expected {expected}; got {got}"


def summarize(entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One implementation/device's table tests -> {policies, rows, matches}."""
    policies = sorted({e["policy"] for e in entries})
    rows = [r for e in entries for r in e["rows"]]
    observed: dict[DecisionState, tuple[bool | None, bool]] = {}  # one (vote, decision) per state: its first placement
    for r in rows:
        state = DecisionState(**{**r["state"], "policy": Policy.parse(r["state"]["policy"])})
        observed.setdefault(state, (r["got_vote"], r["got_decision"]))
    page_sizes = {s.page_size for s in observed} or {4}
    judged_by = {e.get("profile") for e in entries} - {None}
    if judged_by - set(VOTE_PROFILES):
        matches = f"judged by the {', '.join(sorted(judged_by))} profile's own vote" + ("" if rows else ": every row agrees")
    elif not rows:
        matches = SPEC_MATCH
    else:
        shapes = matching_shapes(observed, policies, page_size=page_sizes.pop()) if len(page_sizes) == 1 else []
        if shapes:
            matches = "matches " + "; ".join(SHAPE_SUMMARY[s] for s in shapes)
        else:
            matches = "matches neither this spec nor an upstream guard shape (spec/upstream.py)"
    return {"policies": policies, "rows": rows, "matches": matches}
