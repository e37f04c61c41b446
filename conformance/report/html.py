"""The conformance report as one self-contained HTML page (no scripts, fonts or styles from elsewhere).

Rendered from the JSON report alone. The first screen is the matrix (clause
groups as column bands; its header row and first column stay in view while
scrolling; it fits a 1,400 px window) and one row per defect entry, defects
before hardening. Each entry's card below says what goes wrong, where, how
to reproduce it, and folds its trace excerpt and its tests (each listed once);
a defect or hardening cell links to its entry. What was tested, the decision
tables, expected failures, skips and the clauses' text follow, folded.
`python -m conformance.report.view PAGE.html --screenshot PNG` shows it in a
real browser.
"""

from __future__ import annotations

import shlex
from html import escape
from typing import Any, Mapping

from conformance.report.defect_text import SECTIONS, count, divergence_lines, entries, headline, impls, interruption, repro_words, rerun_command, where_lines
from conformance.report.terminal import LETTERS, MEANINGS, decision_summary

COLOURS = {"defect": "#d73a49", "hardening": "#f3b16b", "divergence": "#8fb8f0", "unverified": "#f0a3ab", "xfail": "#f9d77e", "pass": "#85d08a",
           "not-applicable": "#eeeeee", "not-judged": "#c9d7e8", "not-run": "#e4e4e4", "uncovered": "#ffffff"}
FAILED = ("defect", "hardening", "divergence")
STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0.8em 1em; color: #1b1f23; font-size: 14px; }
h1 { font-size: 1.35em; margin: 0 0 0.2em; } h2 { font-size: 1.15em; margin: 1em 0 0.4em; } h3 { font-size: 1em; margin: 0.6em 0 0.3em; }
h1, h2, h3 { font-weight: 600; } code { font-size: 0.92em; } .muted { color: #57606a; } p.summary { margin: 0 0 0.6em; }
table { border-collapse: collapse; margin: 0.3em 0 0.8em; }
th, td { border: 1px solid #d0d7de; padding: 0.2em 0.45em; text-align: left; vertical-align: top; }
table.matrix { font-size: 12px; }
table.matrix thead th { position: sticky; background: #f6f8fa; z-index: 2; text-align: center; }
table.matrix tr.bands th { top: 0; height: 1.5em; font-weight: 500; color: #57606a; }
table.matrix tr.ids th { top: calc(1.5em + 0.4em + 1px); }
table.matrix th.corner { left: 0; z-index: 3; text-align: left; vertical-align: bottom; }
table.matrix tbody th { position: sticky; left: 0; background: #fff; z-index: 1; font-weight: 500; white-space: nowrap;
                        max-width: 30em; overflow: hidden; text-overflow: ellipsis; }
table.matrix td.cell { text-align: center; font-family: ui-monospace, monospace; width: 1.5em; min-width: 1.5em; padding: 0.15em 0; }
table.matrix td.cell a { color: inherit; text-decoration: none; display: block; font-weight: 700; }
table.matrix th.clause { width: 1.5em; min-width: 1.5em; padding: 0.15em 0; }
table.matrix th.clause a { color: inherit; text-decoration: none; }
table.matrix .edge { border-left: 2px solid #8c959f; }
table.defects td, table.defects th { font-size: 13px; }
.legend { font-size: 12px; margin: 0.2em 0; } .legend span { display: inline-block; margin-right: 0.9em; }
.swatch { display: inline-block; width: 1.4em; text-align: center; border: 1px solid #d0d7de; font-family: ui-monospace, monospace; }
.banner { background: #fff5d6; border: 1px solid #e3b341; padding: 0.4em 0.8em; margin: 0.5em 0; }
.card { border: 1px solid #d0d7de; border-left: 4px solid #d73a49; padding: 0.4em 0.8em; margin: 0.5em 0; }
.card.hardening { border-left-color: #f3b16b; } .card.divergence { border-left-color: #8fb8f0; } .card p { margin: 0.2em 0; } .card ul { margin: 0.2em 0; }
pre.trace { font-size: 12px; background: #f6f8fa; padding: 0.4em; overflow-x: auto; margin: 0.2em 0; }
details { margin: 0.3em 0; } details > summary { cursor: pointer; }
"""


def _e(value: Any) -> str:
    return escape(str(value), quote=True)


def _swatch(status: str) -> str:
    return f'<span class="swatch" style="background:{COLOURS[status]}">{_e(LETTERS[status])}</span>'


def _anchor(entry: Mapping[str, Any]) -> str:
    return f"defect-{entry['id']}"


def band_label(group: str) -> str:
    """A clause group's name short enough for its band ('Fence (what may be inserted)' -> 'Fence')."""
    return group.split(" (")[0].split(" ")[0]


def _entry_of_cell(data: Mapping[str, Any]) -> dict[tuple[str, str], str]:
    """(impl, clause) -> the anchor of the entry holding a test that failed naming that clause there."""
    tests = {t["nodeid"]: t for t in data["tests"]}
    out: dict[tuple[str, str], str] = {}
    for entry in entries(data):
        for member in entry["tests"]:
            for clause in [entry["clause"], *((tests.get(member["nodeid"]) or {}).get("failed_clauses") or {})]:
                out.setdefault((member["impl"], clause), _anchor(entry))
    return out


def _summary(data: Mapping[str, Any]) -> str:
    suite, run = data["suite"], data["run"]
    found = {verdict: len(entries(data, verdict)) for verdict, _ in SECTIONS}
    divergences = f', {found["divergence"]} divergence(s) by design' if found["divergence"] else ""
    return (f'<p class="summary"><strong>{found["defect"]} defect(s)</strong>, {found["hardening"]} hardening gap(s){divergences} &middot; '
            f'{_e(", ".join(data["matrix"]) or "no implementation")} &middot; {_e(run["started"])} &middot; '
            f'{_e(suite["name"])} <code>{_e((suite["commit"] or "unknown")[:12])}</code> &middot; '
            f'<code>pytest {_e(shlex.join(run["pytest_args"]))}</code></p>')


def _matrix(data: Mapping[str, Any]) -> list[str]:
    matrix = data["matrix"]
    rows = [(impl, device) for impl, devices in matrix.items() for device in devices]
    if not rows:
        return ["<p>No implementation under test.</p>"]
    clause_ids = list(matrix[rows[0][0]][rows[0][1]])
    texts = data.get("clauses", {})
    groups = [texts.get(c, {}).get("group", c[0]) for c in clause_ids]
    edges = {i for i in range(1, len(clause_ids)) if groups[i] != groups[i - 1]}
    bands: list[tuple[str, int]] = []
    for group in groups:
        if bands and bands[-1][0] == group:
            bands[-1] = (group, bands[-1][1] + 1)
        else:
            bands.append((group, 1))
    linked = _entry_of_cell(data)
    out = ['<table class="matrix"><thead><tr class="bands"><th class="corner" rowspan="2">implementation / device</th>']
    out += [f'<th colspan="{n}" title="{_e(g)}"{" class=edge" if i else ""}>{_e(band_label(g))}</th>' for i, (g, n) in enumerate(bands)]
    out.append('</tr><tr class="ids">')
    out += [f'<th class="clause{" edge" if i in edges else ""}"><a href="#clause-{c}" title="{_e(c)} {_e(texts.get(c, {}).get("title", ""))}">'
            f'{_e(c)}</a></th>' for i, c in enumerate(clause_ids)]
    out.append("</tr></thead><tbody>")
    for impl, device in rows:
        out.append(f'<tr><th title="{_e(impl)} / {_e(device)}">{_e(impl)} / {_e(device)}</th>')
        for i, clause in enumerate(clause_ids):
            status = matrix[impl][device][clause]
            note = data.get("cell_notes", {}).get(impl, {}).get(device, {}).get(clause)
            tip = _e(f"{clause} {texts.get(clause, {}).get('title', '')}: {MEANINGS[status]}" + (f": {note['why']}" if note else ""))
            letter = _e(LETTERS[status])
            target = linked.get((impl, clause))
            body = f'<a href="#{target}">{letter}</a>' if target and status in FAILED else letter
            edge = " edge" if i in edges else ""
            out.append(f'<td class="cell{edge}" style="background:{COLOURS[status]}" title="{tip}">{body}</td>')
        out.append("</tr>")
    out.append("</tbody></table>")
    out.append('<p class="legend">' + "".join(f"<span>{_swatch(s)} {_e(MEANINGS[s])}</span>" for s in LETTERS) + "</p>")
    return out


def _index(data: Mapping[str, Any]) -> list[str]:
    """One row per entry: what a maintainer files, then what they may harden."""
    found = entries(data)
    if not found:
        return ["<h2>Defects</h2>", "<p>None: no test failed naming a clause.</p>"]
    out = ["<h2>Defects and hardening gaps</h2>", '<table class="defects"><tr><th></th><th>entry</th><th>implementations</th>'
           "<th>tests</th><th>what goes wrong</th><th>reproduce</th></tr>"]
    for entry in found:
        repro = entry.get("repro")
        words = "script" if repro and repro.get("path") else ("none yet" if repro else "")
        out.append(f'<tr><td>{_swatch(entry["verdict"])}</td><td><a href="#{_anchor(entry)}">{_e(headline(entry))}</a></td>'
                   f'<td>{_e(impls(entry))}</td><td>{len(entry["tests"])}</td><td>{_e(entry["sentence"])}</td><td>{_e(words)}</td></tr>')
    out.append("</table>")
    return out


def _card(entry: Mapping[str, Any], data: Mapping[str, Any]) -> list[str]:
    out = [f'<div class="card {_e(entry["verdict"])}" id="{_anchor(entry)}">',
           f'<h3>{_swatch(entry["verdict"])} <a href="#clause-{entry["clause"]}">{_e(headline(entry))}</a></h3>',
           f"<p>{_e(entry['sentence'])}</p>", f'<p class="muted">{_e(impls(entry))} &middot; {_e(count(entry))}'
           + (f" &middot; also breaks {_e(', '.join(entry['also']))}" if entry.get("also") else "") + "</p>"]
    if entry.get("divergence"):
        out.append("<ul>" + "".join(f"<li>{_e(line)}</li>" for line in divergence_lines(entry)) + "</ul>")
    lines = where_lines(entry)
    if lines:
        out.append("<p><em>Where:</em></p><ul>" + "".join(f"<li><code>{_e(line)}</code></li>" for line in lines) + "</ul>")
    words = repro_words(entry)
    if words is not None:
        out.append(f"<p><em>Reproduce:</em> {'<code>' + _e(words) + '</code>' if entry['repro'].get('path') else _e(words)}</p>")
    out.append(f"<p><em>Rerun:</em> <code>{_e(rerun_command(entry, data))}</code></p>")
    if entry.get("excerpt"):
        out.append("<details><summary>trace around the first deviating event</summary>"
                   f'<pre class="trace">{_e(chr(10).join(entry["excerpt"]))}</pre></details>')
    out.append(f"<details><summary>{_e(count(entry))}</summary><ul>"
               + "".join(f"<li><code>{_e(t['nodeid'])}</code></li>" for t in entry["tests"]) + "</ul></details></div>")
    return out


def _cards(data: Mapping[str, Any]) -> list[str]:
    out = []
    for verdict, heading in SECTIONS:
        found = entries(data, verdict)
        if found:
            out += [f"<h2>{_e(heading)} ({len(found)})</h2>"] + [line for entry in found for line in _card(entry, data)]
    return out


def _failed_otherwise(data: Mapping[str, Any]) -> list[str]:
    items = [f"<li>{_e(impl)} / {_e(device)}: {words} <code>{_e(n)}</code></li>"
             for impl, devices in data.get("failing", {}).items() for device, found in devices.items()
             for key, words in (("naming_no_clause", "failed naming no clause:"), ("weak", "weak test failed (cites no clause):"))
             for n in found.get(key, [])]
    return [f"<details open><summary>{len(items)} failed test(s) in no entry</summary><ul>" + "".join(items) + "</ul></details>"] if items else []


def _folded(title: str, body: list[str]) -> list[str]:
    return [f"<details><summary>{_e(title)}</summary>"] + body + ["</details>"]


def _identity(data: Mapping[str, Any]) -> list[str]:
    suite, run, target = data["suite"], data["run"], data["target"]
    modified = " (with uncommitted changes)" if suite.get("modified") else ""
    out = ["<table>",
           f"<tr><th>suite</th><td>{_e(suite['name'])} {_e(suite['version'] or '(version unknown)')}, "
           f"commit <code>{_e(suite['commit'] or 'unknown')}</code>{_e(modified)}</td></tr>",
           f"<tr><th>run</th><td>{_e(run['started'])} to {_e(run['finished'])} ({run['duration_s']:.1f}s)<br>"
           f"<code>pytest {_e(shlex.join(run['pytest_args']))}</code></td></tr>",
           f"<tr><th>machine</th><td>torch {_e(target['torch'])}, Python {_e(target['python'])}, {_e(target['platform'])}</td></tr>",
           "</table>", "<table><tr><th>device</th><th>kind</th><th>model</th><th>driver</th></tr>"]
    out += [f"<tr><td>{_e(d['name'])}</td><td>{_e(d['kind'])}</td><td>{_e(d['model'])}</td><td>{_e(d['driver'] or '-')}</td></tr>"
            for d in target["devices"]]
    out.append("</table>")
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


def _decision_tables(data: Mapping[str, Any]) -> list[str]:
    tables = [(impl, device, table) for impl, devices in data.get("decision_table", {}).items() for device, table in devices.items()]
    out = []
    for impl, device, table in tables:
        headline_, rows = decision_summary(table) or ("", [])
        out.append(f"<p><strong>{_e(impl)} / {_e(device)}</strong>: {_e(headline_)}</p>")
        if rows:
            out.append("<ul>" + "".join(f"<li>{_e(r)}</li>" for r in rows) + "</ul>")
    return out or ["<p>No decision-table test ran.</p>"]


def _expected(data: Mapping[str, Any]) -> list[str]:
    if not data["expected_failures"]:
        return ["<p>None.</p>"]
    return (["<table><tr><th>impl</th><th>test</th><th>reason</th><th>matched</th></tr>"]
            + [f"<tr><td>{_e(e['impl'])}</td><td><code>{_e(e['test'])}</code></td><td>{_e(e['reason'])}</td>"
               f"<td>{'yes' if e['matched'] else '<strong>STALE</strong>'}</td></tr>" for e in data["expected_failures"]] + ["</table>"])


def _skips(data: Mapping[str, Any]) -> list[str]:
    if not data.get("skips"):
        return ["<p>None.</p>"]
    return ["<table><tr><th>tests</th><th>reason</th><th>per implementation</th></tr>" + "".join(
        f"<tr><td>{g['count']}</td><td>{_e(g['reason'])}</td><td>{_e(', '.join(f'{i} {n}' for i, n in g['impls'].items()))}</td></tr>"
        for g in data["skips"]) + "</table>"]


def _clauses(data: Mapping[str, Any]) -> list[str]:
    out = []
    for cid, clause in data.get("clauses", {}).items():
        judges = ", ".join(clause.get("profiles") or []) or "every profile"
        out += [f'<h3 id="clause-{cid}">{_e(cid)}. {_e(clause["title"])} <span class="muted">({_e(clause["group"])}; '
                f'{_e(clause.get("kind", ""))}, judges {_e(judges)})</span></h3>',
                f"<p>{_e(clause['statement'])}</p>", f"<p><em>Why:</em> {_e(clause['rationale'])}</p>",
                f"<p><em>Upstream ({_e(clause['stance'])}):</em> {_e(clause['upstream'])}</p>"]
        if clause["evidence"]:
            out.append("<p><em>Evidence:</em></p><ul>" + "".join(f"<li>{_e(e)}</li>" for e in clause["evidence"]) + "</ul>")
    return out


def _details(data: Mapping[str, Any]) -> list[str]:
    out = ["<h2>Details</h2>"]
    out += _folded("What was tested: suite, run, machine, implementations", _identity(data))
    out += _folded("Decision table", _decision_tables(data))
    out += _folded(f"Expected failures ({len(data['expected_failures'])})", _expected(data))
    out += _folded(f"Skipped ({sum(g['count'] for g in data.get('skips', []))} tests)", _skips(data))
    if data.get("not_run"):
        out += _folded(f"Not run ({len(data['not_run'])})", ["<ul>" + "".join(f"<li>{_e(m['impl'])}: {_e(m['reason'])}</li>" for m in data["not_run"]) + "</ul>"])
    if data.get("interleavings"):
        out += _folded("Systematic exploration", ["<p>" + _e(", ".join(f"{impl}: {n} interleavings" for impl, n in data["interleavings"].items())) + "</p>"])
    # Open: matrix headers and entry cards link into it, and a link cannot open a closed fold.
    out += ["<details open><summary>Clauses</summary>"] + _clauses(data) + ["</details>"]
    return out


def render_html(data: Mapping[str, Any]) -> str:
    banners = [f'<p class="banner"><strong>{_e(d["device"])} did not run here</strong> ({_e(d["reason"])}): its rows read '
               "<em>not run</em>, never pass.</p>" for d in data.get("devices_not_run", [])]
    stopped = interruption(data)
    # First on the page: a short run's matrix and its "0 defect(s)" would read as a verdict otherwise.
    first = [f'<p class="banner"><strong>{_e(stopped)}</strong></p>'] if stopped else []
    body = (["<h1>Conformance report</h1>", *first, _summary(data)] + _matrix(data) + banners + _index(data) + _cards(data)
            + _failed_otherwise(data) + _details(data))
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Conformance report</title>"
            f"<style>{STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")
