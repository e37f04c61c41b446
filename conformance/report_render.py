"""The conformance report as people read it: the terminal summary and the Markdown file (plus writing every file)."""

from __future__ import annotations

import json
import shlex
from typing import Any, Callable, Mapping

from conformance.decision_rows import describe_row

LETTERS = {"defect": "D", "hardening": "H", "unverified": "f", "xfail": "x", "pass": "P", "not-applicable": "n",
           "not-judged": "j", "not-run": "-", "uncovered": "."}
MEANINGS = {
    "defect": "defect (a behavioural clause, or a mechanism of the declared profile, failed)",
    "hardening": "hardening not met (stricter than the design must be)",
    "unverified": "unverified (its failing tests failed first on another clause)",
    "xfail": "expected failure",
    "pass": "pass (every citing test that was judged passed)",
    "not-applicable": "not applicable (mechanism of another architecture profile)",
    "not-judged": "not judged (a precondition this deployment does not produce, or a capability the adapter lacks)",
    "not-run": "not run (the device is not here)",
    "uncovered": "uncovered",
}
# Terminal markup per verdict (pytest's TerminalWriter applies it only where colour is on: a TTY, no NO_COLOR).
MARKUP = {"defect": {"red": True, "bold": True}, "hardening": {"yellow": True}, "unverified": {"purple": True},
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
    """One row per impl/device, one column per clause (stays narrow as GPUs add rows), then what failed and why."""
    colour = colour or _plain
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
    for label, (impl, device) in zip(labels, columns):
        if device in not_run:
            continue
        row = matrix[impl][device]
        defects = [c for c in clause_ids if row[c] == "defect"]
        hardening = [c for c in clause_ids if row[c] == "hardening"]
        named = (f"; defects: {', '.join(defects)}" if defects else "") + (f"; hardening not met: {', '.join(hardening)}" if hardening else "")
        lines.append(f"{label}: {_counts(row)}{named}")
        found = data.get("failing", {}).get(impl, {}).get(device, {})
        lines += [f"  {found['clauses'][c]}" for c in defects + hardening if c in found.get("clauses", {})]
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


def _identity_lines(data: Mapping[str, Any]) -> list[str]:
    suite, run, target = data["suite"], data["run"], data["target"]
    modified = " (with uncommitted changes)" if suite.get("modified") else ""
    out = [f"- suite: {suite['name']} {suite['version'] or '(version unknown)'}, commit {suite['commit'] or 'unknown'}{modified}",
           f"- run: {run['started']} to {run['finished']} ({run['duration_s']:.1f}s): `pytest {shlex.join(run['pytest_args'])}`",
           f"- torch {target['torch']}, Python {target['python']}, platform {target['platform']}",
           f"- device kinds: {', '.join(target['device_kinds'])}", "",
           "| device | kind | model | driver |", "|---|---|---|---|"]
    out += [f"| {d['name']} | {d['kind']} | {d['model']} | {d['driver'] or '-'} |" for d in target["devices"]]
    out.append("")
    for device in data.get("devices_not_run", []):
        out.append(f"**{device['device']} did not run here** ({device['reason']}): its rows read `not-run`, never `pass`.")
    out += ["", "## Implementations", "", "| name | from | factory | module | distribution | adapter |", "|---|---|---|---|---|---|"]
    for impl in data["implementations"]:
        dist = impl["distribution"]
        source = impl["source"] + (f" {impl['source_value']}" if impl.get("source_value") else "")
        out.append(f"| {impl['name']} | {source} | `{impl['factory'] or '-'}` | `{impl['module']}` | "
                   f"{dist['name'] + ' ' + dist['version'] if dist else 'not an installed distribution'} | `{impl['adapter']}` |")
    return out


def render_markdown(data: Mapping[str, Any]) -> str:
    titles = {cid: clause["title"] for cid, clause in data.get("clauses", {}).items()}
    out = ["# Conformance report", "", "## Target", ""] + _identity_lines(data)
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
            for nodeid in found.get("weak", []):
                out.append(f"- {device}, weak test failed (cites no clause): `{nodeid}`")
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
    out += ["", "## Skipped", ""]
    out += [f"- {g['count']} x {g['reason']} ({', '.join(f'{i} {n}' for i, n in g['impls'].items())})" for g in data.get("skips", [])] or ["None."]
    out += ["", "## Uncovered clauses", ""]
    for impl, devices in data["uncovered"].items():
        for device, clauses in devices.items():
            out.append(f"- {impl} / {device}: {', '.join(clauses) if clauses else 'none'}")
    if data.get("interleavings"):
        out += ["", "## Systematic exploration", ""] + [f"- {impl}: {n} interleavings" for impl, n in data["interleavings"].items()]
    counts: dict[str, int] = {}
    for test in data["tests"]:
        counts[test["outcome"]] = counts.get(test["outcome"], 0) + 1
    weak = sum(1 for test in data["tests"] if test.get("weak") is not None)
    out += ["", "## Tests", "", (", ".join(f"{n} {o}" for o, n in sorted(counts.items())) or "none ran")
            + (f" ({weak} weak: they cite no clause)" if weak else ""), ""]
    return "\n".join(out)
