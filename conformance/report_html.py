"""The conformance report as one self-contained HTML page (no scripts, fonts or styles from elsewhere).

Rendered from the JSON report alone. The matrix is coloured by status; every
failing cell (F, f) links to the tests that failed there, each with the line
naming its clause, and every clause heading links to the clause's text from
the spec (statement, rationale, what upstream does, evidence).
"""

from __future__ import annotations

import shlex
from html import escape
from typing import Any, Mapping

from conformance.report_render import LETTERS, MEANINGS, decision_summary

COLOURS = {"defect": "#d73a49", "hardening": "#f3b16b", "unverified": "#f0a3ab", "xfail": "#f9d77e", "pass": "#85d08a",
           "not-applicable": "#eeeeee", "not-judged": "#c9d7e8", "not-run": "#e4e4e4", "uncovered": "#ffffff"}
FAILED = ("defect", "hardening", "unverified")
STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em; color: #1b1f23; max-width: 80em; }
h1, h2, h3 { font-weight: 600; } code { font-size: 0.9em; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #d0d7de; padding: 0.25em 0.5em; text-align: left; vertical-align: top; }
table.matrix td.cell { text-align: center; font-family: ui-monospace, monospace; min-width: 1.6em; padding: 0.2em; }
table.matrix td.cell a { color: inherit; text-decoration: none; display: block; }
table.matrix th.clause a { color: inherit; }
.banner { background: #fff5d6; border: 1px solid #e3b341; padding: 0.6em 1em; margin: 1em 0; }
.legend span { display: inline-block; margin-right: 1em; }
.swatch { display: inline-block; width: 1.4em; text-align: center; border: 1px solid #d0d7de; font-family: ui-monospace, monospace; }
li.failure { margin-bottom: 0.4em; } .muted { color: #57606a; }
"""


def _e(value: Any) -> str:
    return escape(str(value), quote=True)


def _swatch(status: str) -> str:
    return f'<span class="swatch" style="background:{COLOURS[status]}">{_e(LETTERS[status])}</span>'


def _cell_id(row: int, clause: str) -> str:
    return f"cell-{row}-{clause}"


def _identity(data: Mapping[str, Any]) -> list[str]:
    suite, run, target = data["suite"], data["run"], data["target"]
    modified = " (with uncommitted changes)" if suite.get("modified") else ""
    out = ["<h2>What was tested</h2>", "<table>",
           f"<tr><th>suite</th><td>{_e(suite['name'])} {_e(suite['version'] or '(version unknown)')}, "
           f"commit <code>{_e(suite['commit'] or 'unknown')}</code>{_e(modified)}</td></tr>",
           f"<tr><th>run</th><td>{_e(run['started'])} to {_e(run['finished'])} ({run['duration_s']:.1f}s)<br>"
           f"<code>pytest {_e(shlex.join(run['pytest_args']))}</code></td></tr>",
           f"<tr><th>machine</th><td>torch {_e(target['torch'])}, Python {_e(target['python'])}, {_e(target['platform'])}</td></tr>",
           "</table>", "<table><tr><th>device</th><th>kind</th><th>model</th><th>driver</th></tr>"]
    out += [f"<tr><td>{_e(d['name'])}</td><td>{_e(d['kind'])}</td><td>{_e(d['model'])}</td><td>{_e(d['driver'] or '-')}</td></tr>"
            for d in target["devices"]]
    out.append("</table>")
    for device in data.get("devices_not_run", []):
        out.append(f'<p class="banner"><strong>{_e(device["device"])} did not run here</strong> ({_e(device["reason"])}): '
                   "its rows read <em>not run</em>, never pass.</p>")
    out += ["<h3>Implementations</h3>", "<table><tr><th>name</th><th>from</th><th>factory</th><th>module</th>"
            "<th>distribution</th><th>adapter</th><th>capabilities</th></tr>"]
    for impl in data["implementations"]:
        dist = impl["distribution"]
        source = impl["source"] + (f" {impl['source_value']}" if impl.get("source_value") else "")
        checkout = impl.get("checkout")
        if checkout and checkout.get("commit"):
            source += f" (commit {checkout['commit'][:12]})"
        out.append(f"<tr><td>{_e(impl['name'])}</td><td>{_e(source)}</td><td><code>{_e(impl['factory'] or '-')}</code></td>"
                   f"<td><code>{_e(impl['module'])}</code></td>"
                   f"<td>{_e(dist['name'] + ' ' + dist['version']) if dist else '<span class=muted>not an installed distribution</span>'}</td>"
                   f"<td><code>{_e(impl['adapter'])}</code></td><td>{_e(', '.join(impl['capabilities']))}</td></tr>")
    out.append("</table>")
    return out


def _failures_by_cell(data: Mapping[str, Any]) -> dict[tuple[str, str, str], list[tuple[str, str]]]:
    """(impl, device, clause) -> [(nodeid, what its failure said about the clause)] for the F and f cells."""
    out: dict[tuple[str, str, str], list[tuple[str, str]]] = {}
    not_run = {d["device"] for d in data.get("devices_not_run", [])}
    for test in data["tests"]:
        if test["outcome"] != "fail" or test.get("weak") is not None:
            continue
        named = test.get("failed_clauses") or {}
        devices = [test["device"]] if test["device"] != "any" else list(data["matrix"].get(test["impl"], {}))
        for device in devices:
            if device in not_run:
                continue
            for clause, line in named.items():
                out.setdefault((test["impl"], device, clause), []).append((test["nodeid"], line))
            for clause in test["clauses"]:
                if clause not in named:
                    said = "; ".join(named.values()) or "its failure named no clause"
                    out.setdefault((test["impl"], device, clause), []).append((test["nodeid"], f"failed for another reason: {said}"))
    return out


def _matrix(data: Mapping[str, Any], failures: Mapping[tuple[str, str, str], list]) -> list[str]:
    matrix = data["matrix"]
    rows = [(impl, device) for impl, devices in matrix.items() for device in devices]
    if not rows:
        return ["<p>No implementation under test.</p>"]
    clause_ids = list(matrix[rows[0][0]][rows[0][1]])
    titles = {cid: c["title"] for cid, c in data.get("clauses", {}).items()}
    out = ['<p class="legend">' + "".join(f"<span>{_swatch(s)} {_e(MEANINGS[s])}</span>" for s in LETTERS) + "</p>",
           '<table class="matrix"><tr><th>implementation / device</th>']
    out += [f'<th class="clause"><a href="#clause-{c}" title="{_e(titles.get(c, ""))}">{_e(c)}</a></th>' for c in clause_ids]
    out.append("</tr>")
    for index, (impl, device) in enumerate(rows):
        out.append(f"<tr><th>{_e(impl)} / {_e(device)}</th>")
        for clause in clause_ids:
            status = matrix[impl][device][clause]
            letter = _e(LETTERS[status])
            note = data.get("cell_notes", {}).get(impl, {}).get(device, {}).get(clause)
            tip = _e(f"{clause} {titles.get(clause, '')}: {MEANINGS[status]}" + (f": {note['why']}" if note else ""))
            body = f'<a href="#{_cell_id(index, clause)}">{letter}</a>' if (impl, device, clause) in failures and status in FAILED else letter
            out.append(f'<td class="cell" style="background:{COLOURS[status]}" title="{tip}">{body}</td>')
        out.append("</tr>")
    out.append("</table>")
    return out


def _failure_sections(data: Mapping[str, Any], failures: Mapping[tuple[str, str, str], list]) -> list[str]:
    rows = [(impl, device) for impl, devices in data["matrix"].items() for device in devices]
    out = ["<h2>Failures</h2>"]
    any_failure = False
    for index, (impl, device) in enumerate(rows):
        row = data["matrix"][impl][device]
        for clause, status in row.items():
            found = failures.get((impl, device, clause))
            if not found or status not in FAILED:
                continue
            any_failure = True
            out.append(f'<h3 id="{_cell_id(index, clause)}">{_e(impl)} / {_e(device)}: '
                       f'<a href="#clause-{clause}">{_e(clause)}</a> {_swatch(status)}</h3><ul>')
            out += [f'<li class="failure"><code>{_e(nodeid)}</code><br>{_e(line)}</li>' for nodeid, line in found]
            out.append("</ul>")
        found = data.get("failing", {}).get(impl, {}).get(device, {})
        for key, words in (("naming_no_clause", "failed naming no clause"), ("weak", "weak tests that failed (they cite no clause)")):
            if found.get(key):
                any_failure = True
                out.append(f"<h3>{_e(impl)} / {_e(device)}: {words}</h3><ul>"
                           + "".join(f"<li><code>{_e(n)}</code></li>" for n in found[key]) + "</ul>")
    if not any_failure:
        out.append("<p>None.</p>")
    return out


def _details(data: Mapping[str, Any]) -> list[str]:
    out = ["<h2>Decision table</h2>"]
    tables = [(impl, device, table) for impl, devices in data.get("decision_table", {}).items() for device, table in devices.items()]
    for impl, device, table in tables:
        headline, rows = decision_summary(table) or ("", [])
        out.append(f"<p><strong>{_e(impl)} / {_e(device)}</strong>: {_e(headline)}</p>")
        if rows:
            out.append("<ul>" + "".join(f"<li>{_e(r)}</li>" for r in rows) + "</ul>")
    if not tables:
        out.append("<p>No decision-table test ran.</p>")
    out += ["<h2>Expected failures</h2>"]
    if data["expected_failures"]:
        out.append("<table><tr><th>impl</th><th>test</th><th>reason</th><th>matched</th></tr>")
        out += [f"<tr><td>{_e(e['impl'])}</td><td><code>{_e(e['test'])}</code></td><td>{_e(e['reason'])}</td>"
                f"<td>{'yes' if e['matched'] else '<strong>STALE</strong>'}</td></tr>" for e in data["expected_failures"]]
        out.append("</table>")
    else:
        out.append("<p>None.</p>")
    out += ["<h2>Skipped</h2>"]
    out.append("<table><tr><th>tests</th><th>reason</th><th>per implementation</th></tr>" + "".join(
        f"<tr><td>{g['count']}</td><td>{_e(g['reason'])}</td><td>{_e(', '.join(f'{i} {n}' for i, n in g['impls'].items()))}</td></tr>"
        for g in data.get("skips", [])) + "</table>" if data.get("skips") else "<p>None.</p>")
    if data.get("not_run"):
        out += ["<h2>Not run</h2>", "<ul>" + "".join(f"<li>{_e(m['impl'])}: {_e(m['reason'])}</li>" for m in data["not_run"]) + "</ul>"]
    if data.get("interleavings"):
        out += ["<h2>Systematic exploration</h2>",
                "<p>" + _e(", ".join(f"{impl}: {n} interleavings" for impl, n in data["interleavings"].items())) + "</p>"]
    return out


def _clauses(data: Mapping[str, Any]) -> list[str]:
    out = ["<h2>Clauses</h2>"]
    for cid, clause in data.get("clauses", {}).items():
        judges = ", ".join(clause.get("profiles") or []) or "every profile"
        out += [f'<h3 id="clause-{cid}">{_e(cid)}. {_e(clause["title"])} <span class="muted">({_e(clause["group"])}; '
                f'{_e(clause.get("kind", ""))}, judges {_e(judges)})</span></h3>',
                f"<p>{_e(clause['statement'])}</p>", f"<p><em>Why:</em> {_e(clause['rationale'])}</p>",
                f"<p><em>Upstream ({_e(clause['stance'])}):</em> {_e(clause['upstream'])}</p>"]
        if clause["evidence"]:
            out.append("<p><em>Evidence:</em></p><ul>" + "".join(f"<li>{_e(e)}</li>" for e in clause["evidence"]) + "</ul>")
    return out


def render_html(data: Mapping[str, Any]) -> str:
    failures = _failures_by_cell(data)
    body = (["<h1>Conformance report</h1>"] + _identity(data) + ["<h2>Matrix</h2>"] + _matrix(data, failures)
            + _failure_sections(data, failures) + _details(data) + _clauses(data))
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Conformance report</title>"
            f"<style>{STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")
