"""The conformance report in the terminal: the matrix, one line per defect, the counts of the rest.

The Markdown file is conformance/report/markdown.py's, the HTML page conformance/report/html.py's; conformance/report/files.py writes them.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Mapping

from conformance.report.decision_rows import describe_row
from conformance.report.defect_text import SECTIONS, VERDICT_LETTER, entries, interruption, terminal_line

LETTERS = {"defect": "D", "hardening": "H", "divergence": "V", "unverified": "f", "xfail": "x", "pass": "P", "not-applicable": "n",
           "not-judged": "j", "not-run": "-", "uncovered": "."}
MEANINGS = {
    "defect": "defect (a behavioural clause, or a mechanism of the declared profile, failed)",
    "hardening": "hardening not met (stricter than the design must be)",
    "divergence": "divergence (upstream's documented design, where the spec differs by intent: not a defect)",
    "unverified": "unverified (its failing tests failed first on another clause)",
    "xfail": "expected failure",
    "pass": "pass (every citing test that was judged passed)",
    "not-applicable": "not applicable (mechanism of another architecture profile)",
    "not-judged": "not judged (a precondition this deployment does not produce, or a capability the adapter lacks)",
    "not-run": "not run (the device is not here)",
    "uncovered": "uncovered",
}
# Terminal markup per verdict (pytest's TerminalWriter applies it only where colour is on: a TTY, no NO_COLOR).
MARKUP = {"defect": {"red": True, "bold": True}, "hardening": {"yellow": True}, "divergence": {"blue": True}, "unverified": {"purple": True},
          "xfail": {"yellow": True}, "pass": {"green": True}, "not-judged": {"cyan": True}}
MAX_ROWS_SHOWN = 8

Colour = Callable[..., str]  # TerminalWriter.markup(text, **markup)


def _columns(matrix: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, str]]:
    return [(impl, device) for impl, devices in matrix.items() for device in devices]


def _counts(row: Mapping[str, str]) -> str:
    """Defects first: what a maintainer files, then what they may harden, then the rest."""
    return ", ".join(f"{sum(1 for s in row.values() if s == status)} {status}" for status in LETTERS
                     if status != "not-run" and (status in ("defect", "hardening", "pass") or any(s == status for s in row.values())))


def grouped_rows(rows: list[Mapping[str, Any]]) -> list[str]:
    """One line per state (its placements merged when they went the same way)."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    per_state: dict[str, set[str]] = {}
    for r in rows:
        state = json.dumps(r["state"], sort_keys=True)
        outcome = json.dumps([r["clause"], r["expected_vote"], r["got_vote"], r["expected_decision"], r["got_decision"]])
        groups.setdefault(state + outcome, []).append(r)
        per_state.setdefault(state, set()).add(outcome)
    lines = []
    for members in groups.values():
        first = dict(members[0])
        if len(per_state[json.dumps(first["state"], sort_keys=True)]) == 1:
            first["where"] = "every placement" if len(members) > 1 else first["where"]
        else:
            first["where"] = ", ".join(m["where"] for m in members)
        lines.append(describe_row(first))
    return lines


def decision_summary(table: Mapping[str, Any] | None) -> tuple[str, list[str]] | None:
    """(headline, row lines) of one implementation/device's decision-table tests; None when none ran."""
    if table is None:
        return None
    lines = grouped_rows(table["rows"])
    policies = ", ".join(table["policies"])
    if not lines:
        return f"decision table ({policies}): every row agrees with the spec", []
    shown = lines[:MAX_ROWS_SHOWN]
    if len(lines) > MAX_ROWS_SHOWN:
        shown.append(f"... {len(lines) - MAX_ROWS_SHOWN} more in the JSON report (decision_table)")
    return f"decision table ({policies}): {len(lines)} rows differ from the spec; {table['matches']}", shown


def _decision_lines(table: Mapping[str, Any] | None) -> list[str]:
    summary = decision_summary(table)
    if summary is None:
        return []
    headline, rows = summary
    return [f"  {headline}"] + [f"    {row}" for row in rows]


def _short(nodeids: list[str], limit: int = 4) -> str:
    return ", ".join(n.split("::")[-1] for n in nodeids[:limit]) + (" ..." if len(nodeids) > limit else "")


def _plain(text: str, **markup: bool) -> str:
    return text


def render_terminal(data: Mapping[str, Any], colour: Colour | None = None) -> list[str]:
    """The matrix (one row per impl/device, one column per clause), then one line per defect entry, then the counts of the rest."""
    colour = colour or _plain
    stopped = interruption(data)
    return ([colour(stopped, yellow=True, bold=True)] if stopped else []) + _matrix_lines(data, colour)


def _matrix_lines(data: Mapping[str, Any], colour: Colour) -> list[str]:
    matrix = data["matrix"]
    columns = _columns(matrix)
    if not columns:
        return ["(no implementation under test)"] + [f"not run: {m['impl']}: {m['reason']}" for m in data.get("not_run", [])]
    not_run = {d["device"]: d["reason"] for d in data.get("devices_not_run", [])}
    clause_ids = list(next(iter(matrix[columns[0][0]].values())).keys())
    labels = [f"{impl}/{device}" for impl, device in columns]
    width = max(len(label) for label in labels)
    cell = max(len(c) for c in clause_ids) + 1
    lines = ["legend: " + "  ".join(f"{letter} {MEANINGS[status]}" for status, letter in LETTERS.items()),
             " " * (width + 2) + "".join(c.ljust(cell) for c in clause_ids).rstrip()]
    for label, (impl, device) in zip(labels, columns):
        row = matrix[impl][device]
        cells = [colour(LETTERS[row[c]], **MARKUP.get(row[c], {})) + " " * (cell - 1) for c in clause_ids]
        lines.append(label.ljust(width + 2) + "".join(cells).rstrip())
    lines += _defect_lines(data, colour)
    for label, (impl, device) in zip(labels, columns):
        if device in not_run:
            continue
        row = matrix[impl][device]
        defects = [c for c in clause_ids if row[c] == "defect"]
        hardening = [c for c in clause_ids if row[c] == "hardening"]
        named = (f"; defects: {', '.join(defects)}" if defects else "") + (f"; hardening not met: {', '.join(hardening)}" if hardening else "")
        lines.append(f"{label}: {_counts(row)}{named}")
        found = data.get("failing", {}).get(impl, {}).get(device, {})
        if found.get("naming_no_clause"):
            lines.append(f"  {len(found['naming_no_clause'])} failed test(s) named no clause: {_short(found['naming_no_clause'])}")
        if found.get("weak"):
            lines.append(f"  {len(found['weak'])} weak test(s) failed (they cite no clause): {_short(found['weak'])}")
        lines += _decision_lines(data.get("decision_table", {}).get(impl, {}).get(device))
    for device, reason in not_run.items():
        lines.append(colour(f"{device}: did not run here ({reason}): its rows are '-', not a pass", yellow=True))
    lines += [f"not run: {m['impl']}: {m['reason']}" for m in data.get("not_run", [])]
    if data.get("interleavings"):
        lines.append("interleavings explored: " + ", ".join(f"{impl} {count}" for impl, count in data["interleavings"].items()))
    return lines


def _defect_lines(data: Mapping[str, Any], colour: Colour) -> list[str]:
    """Defects first, then hardening: one line each (conformance/report/defects.py grouped the failures)."""
    lines = []
    for verdict, heading in SECTIONS:
        found = entries(data, verdict)
        if found:
            lines.append(f"{heading.lower()} ({len(found)}):")
            lines += [f"  {colour(VERDICT_LETTER[verdict], **MARKUP[verdict])} {terminal_line(e)}" for e in found]
    return lines
