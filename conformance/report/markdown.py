"""The conformance report as Markdown: the compact matrix and the defect entries first, ready to paste into an issue.

Then what was tested, where, and every detail the entries do not carry
(decision tables, expected failures, skips, uncovered clauses, counts).
"""

from __future__ import annotations

import shlex
from typing import Any, Mapping

from conformance.report.defect_text import SECTIONS, count, divergence_lines, entries, headline, impls, interruption, repro_words, rerun_command, where_lines
from conformance.report.terminal import LETTERS, MEANINGS, decision_summary


def compact_matrix(data: Mapping[str, Any], rows: list[tuple[str, str]] | None = None) -> list[str]:
    """One row per implementation and device, one letter per clause, and the legend."""
    matrix = data["matrix"]
    rows = rows if rows is not None else [(impl, device) for impl, devices in matrix.items() for device in devices]
    if not rows:
        return ["No implementation under test."]
    clause_ids = list(matrix[rows[0][0]][rows[0][1]])
    out = ["| implementation / device | " + " | ".join(clause_ids) + " |", "|---|" + "---|" * len(clause_ids)]
    out += [f"| {impl} / {device} | " + " | ".join(LETTERS[matrix[impl][device][c]] for c in clause_ids) + " |" for impl, device in rows]
    return out + ["", "Legend: " + "; ".join(f"`{letter}` {MEANINGS[v]}" for v, letter in LETTERS.items()) + "."]


def _summary(data: Mapping[str, Any]) -> str:
    suite, run = data["suite"], data["run"]
    found = {verdict: len(entries(data, verdict)) for verdict, _ in SECTIONS}
    divergences = f", {found['divergence']} divergence(s) by design" if found["divergence"] else ""
    return (f"{found['defect']} defect(s) and {found['hardening']} hardening gap(s){divergences}, from `pytest {shlex.join(run['pytest_args'])}` "
            f"({suite['name']} {suite['version'] or ''}, commit {(suite['commit'] or 'unknown')[:12]}, {run['started']}).")


def entry_lines(entry: Mapping[str, Any], data: Mapping[str, Any]) -> list[str]:
    """One defect entry: what goes wrong, where, how to reproduce and rerun, the trace, its tests (folded)."""
    what = "what differs" if entry["verdict"] == "divergence" else "what goes wrong"
    out = [f"### {headline(entry)}", "", f"- **{what}:** {entry['sentence']}", f"- **implementations:** {impls(entry)} ({count(entry)})"]
    if entry.get("also"):
        out.append(f"- **also breaks:** {', '.join(entry['also'])}")
    out += [f"- {line}" for line in divergence_lines(entry)]
    out += [f"- **where:** `{line}`" for line in where_lines(entry)]
    words = repro_words(entry)
    if words is not None:
        out.append(f"- **reproduce:** `{words}`" if entry["repro"].get("path") else f"- **reproduce:** {words}")
    out.append(f"- **rerun:** `{rerun_command(entry, data)}`")
    if entry.get("excerpt"):
        out += ["- **trace** (`>>` the first deviating event):", "", "  ```", *[f"  {line}" for line in entry["excerpt"]], "  ```"]
    out += ["", f"<details><summary>{count(entry)}</summary>", ""] + [f"- `{t['nodeid']}`" for t in entry["tests"]] + ["", "</details>", ""]
    return out


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


def _failed_otherwise(data: Mapping[str, Any]) -> list[str]:
    out = []
    for impl, devices in data.get("failing", {}).items():
        for device, found in devices.items():
            out += [f"- {impl} / {device}, failed naming no clause: `{n}`" for n in found.get("naming_no_clause", [])]
            out += [f"- {impl} / {device}, weak test failed (cites no clause): `{n}`" for n in found.get("weak", [])]
    return ["## Failed otherwise", "", *out, ""] if out else []


def _decision_tables(data: Mapping[str, Any]) -> list[str]:
    out = []
    for impl, devices in data.get("decision_table", {}).items():
        for device, table in devices.items():
            headline_, rows = decision_summary(table) or ("", [])
            out += [f"- {impl} / {device}: {headline_}"] + [f"  - {row}" for row in rows]
    return ["## Decision table", "", *out, ""] if out else []


def render_markdown(data: Mapping[str, Any]) -> str:
    stopped = interruption(data)
    out = ["# Conformance report", "", *([f"**{stopped}**", ""] if stopped else []), _summary(data), "", "## Matrix", ""]
    out += compact_matrix(data) + [""]
    for verdict, heading in SECTIONS:
        found = entries(data, verdict)
        out += [f"## {heading}", ""] + ([line for entry in found for line in entry_lines(entry, data)] if found else ["None.", ""])
    out += _failed_otherwise(data) + _decision_tables(data)
    out += ["## Target", ""] + _identity_lines(data) + [""]
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
