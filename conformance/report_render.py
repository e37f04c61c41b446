"""The conformance report as people read it: the terminal summary and the Markdown file (plus writing JSON)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from conformance.decision_rows import describe_row

LETTERS = {"fail": "F", "fail-other": "f", "pass": "P", "xfail": "x", "skip": "s", "uncovered": "."}
MEANINGS = {
    "fail": "failed here (a test failed naming this clause)",
    "fail-other": "a test citing it failed for another clause",
    "pass": "pass",
    "xfail": "expected failure",
    "skip": "skip",
    "uncovered": "uncovered",
}
MAX_ROWS_SHOWN = 8


def _columns(matrix: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, str]]:
    return [(impl, device) for impl, devices in matrix.items() for device in devices]


def _counts(row: Mapping[str, str]) -> str:
    return ", ".join(f"{sum(1 for s in row.values() if s == status)} {status}" for status in LETTERS)


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


def render_terminal(data: Mapping[str, Any]) -> list[str]:
    """One row per impl/device, one column per clause (stays narrow as GPUs add rows), then what failed and why."""
    matrix = data["matrix"]
    columns = _columns(matrix)
    if not columns:
        return ["(no implementation under test)"] + [f"not run: {m['impl']}: {m['reason']}" for m in data.get("not_run", [])]
    clause_ids = list(next(iter(matrix[columns[0][0]].values())).keys())
    labels = [f"{impl}/{device}" for impl, device in columns]
    width = max(len(label) for label in labels)
    cell = max(len(c) for c in clause_ids) + 1
    lines = ["legend: " + "  ".join(f"{letter} {MEANINGS[status]}" for status, letter in LETTERS.items()),
             " " * (width + 2) + "".join(c.ljust(cell) for c in clause_ids).rstrip()]
    for label, (impl, device) in zip(labels, columns):
        row = matrix[impl][device]
        lines.append(label.ljust(width + 2) + "".join(LETTERS[row[c]].ljust(cell) for c in clause_ids).rstrip())
    for label, (impl, device) in zip(labels, columns):
        row = matrix[impl][device]
        failing = [c for c in clause_ids if row[c] == "fail"]
        lines.append(f"{label}: {_counts(row)}" + (f"; failed here: {', '.join(failing)}" if failing else ""))
        found = data.get("failing", {}).get(impl, {}).get(device, {})
        lines += [f"  {found['clauses'][c]}" for c in failing if c in found.get("clauses", {})]
        unnamed = found.get("naming_no_clause", [])
        if unnamed:
            lines.append(f"  {len(unnamed)} failed test(s) named no clause: " + ", ".join(n.split("::")[-1] for n in unnamed[:4])
                         + (" ..." if len(unnamed) > 4 else ""))
        lines += _decision_lines(data.get("decision_table", {}).get(impl, {}).get(device))
    lines += [f"not run: {m['impl']}: {m['reason']}" for m in data.get("not_run", [])]
    return lines


def render_markdown(data: Mapping[str, Any], titles: Mapping[str, str] | None = None) -> str:
    titles = titles or {}
    target = data["target"]
    out = ["# Conformance report", "", "## Target", ""]
    out += [f"- torch {target['torch']}, Python {target['python']}, platform {target['platform']}",
            f"- suite commit: {target['suite_commit'] or 'unknown'}",
            f"- device kinds: {', '.join(target['device_kinds'])}", "",
            "| device | kind | model | driver |", "|---|---|---|---|"]
    out += [f"| {d['name']} | {d['kind']} | {d['model']} | {d['driver'] or '-'} |" for d in target["devices"]]
    out += ["", "## Matrix", "", "Statuses: " + "; ".join(f"`{s}` {MEANINGS[s]}" for s in LETTERS) + ".", ""]
    for impl, devices in data["matrix"].items():
        names = list(devices)
        out += [f"### {impl}", "", "| clause | title | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
        clause_ids = list(devices[names[0]]) if names else []
        for clause in clause_ids:
            out.append(f"| {clause} | {titles.get(clause, '')} | " + " | ".join(devices[d][clause] for d in names) + " |")
        out.append("")
        for device in names:
            found = data.get("failing", {}).get(impl, {}).get(device, {})
            for clause, line in found.get("clauses", {}).items():
                out.append(f"- {device}, failed here, {clause}: {line}")
            for nodeid in found.get("naming_no_clause", []):
                out.append(f"- {device}, failed naming no clause: `{nodeid}`")
            summary = decision_summary(data.get("decision_table", {}).get(impl, {}).get(device))
            if summary is not None:
                out += [f"- {device}, {summary[0]}"] + [f"  - {row}" for row in summary[1]]
        out.append("")
    if data.get("not_run"):
        out += ["## Not run", ""] + [f"- {m['impl']}: {m['reason']}" for m in data["not_run"]] + [""]
    out += ["## Expected failures", ""]
    if data["expected_failures"]:
        out += ["| impl | test | reason | matched |", "|---|---|---|---|"]
        out += [f"| {e['impl']} | `{e['test']}` | {e['reason']} | {'yes' if e['matched'] else 'STALE'} |" for e in data["expected_failures"]]
    else:
        out.append("None.")
    out += ["", "## Uncovered clauses", ""]
    for impl, devices in data["uncovered"].items():
        for device, clauses in devices.items():
            out.append(f"- {impl} / {device}: {', '.join(clauses) if clauses else 'none'}")
    counts: dict[str, int] = {}
    for test in data["tests"]:
        counts[test["outcome"]] = counts.get(test["outcome"], 0) + 1
    out += ["", "## Tests", "", ", ".join(f"{n} {o}" for o, n in sorted(counts.items())) or "none ran", ""]
    return "\n".join(out)


def write_report(data: Mapping[str, Any], path: str | Path, titles: Mapping[str, str] | None = None) -> tuple[Path, Path]:
    """PATH.json and PATH.md (parent folders created)."""
    base = Path(path)
    base.parent.mkdir(parents=True, exist_ok=True)
    json_path = base.with_name(base.name + ".json")
    md_path = base.with_name(base.name + ".md")
    json_path.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    md_path.write_text(render_markdown(data, titles), encoding="utf-8")
    return json_path, md_path
