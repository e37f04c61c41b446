"""What a campaign prints and writes: one line per mutant, then survivors with their diffs, then the figures.

kill rate = (killed + timeout) / (every mutant that ran, minus the stillborn
and minus the survivors argued equivalent). A run past its limit counts as
a kill (the suite did not let the mutant pass) that names no clause.

clause named = kills whose first failure names a clause the mutant is
expected to break / kills. A kill naming another clause, or none, is
listed with what it named. A mutant argued to break no clause
(--breaks-no-clause: the cache stays safe and live, only worse at caching)
is named right by a kill that names none, and listed with its argument.

A mutant argued equivalent is still run: if it is killed the argument is
wrong, and it is listed as such and counted as any kill.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from conformance.mutants.campaign import ImplRun, MutantResult
from conformance.mutants.runner import KILLED, STILLBORN, SURVIVED, TIMEOUT

_DIFF_INDENT = "      "


def mutant_line(result: MutantResult) -> str:
    o, m = result.outcome, result.mutant
    if o.status == KILLED:
        named = "/".join(o.clauses) if o.clauses else "no clause"
        off = "" if result.names_expected else f" (expected {_expected(result)})"
        text = f"killed by {o.test} naming {named}{off}" + (", argued to break none" if result.no_clause and result.names_expected else "")
        if o.first_unnamed:
            text += f" (failed first, naming none: {o.first_unnamed})"
    elif o.status == SURVIVED:
        text = "SURVIVED" + (", argued equivalent" if result.equivalent else "") + ("" if o.applied_in else " (the suite never imported the mutated module)")
    elif o.status == STILLBORN:
        text = f"stillborn: {o.message}"
    else:
        text = f"timeout after {o.seconds:.0f} s"
    return f"{result.impl}  {m.id}  {text}"


def _expected(result: MutantResult) -> str:
    return "no clause (argued)" if result.no_clause else "/".join(result.mutant.expected) or "no clause"


def figures(results: Sequence[MutantResult]) -> dict[str, Any]:
    by = {status: [r for r in results if r.status == status] for status in (KILLED, SURVIVED, STILLBORN, TIMEOUT)}
    equivalent = [r for r in by[SURVIVED] if r.equivalent]
    kills = by[KILLED] + by[TIMEOUT]
    judged = len(kills) + len(by[SURVIVED]) - len(equivalent)
    named = [r for r in by[KILLED] if r.names_expected]
    return {"generated": len(results), "stillborn": len(by[STILLBORN]), "killed": len(by[KILLED]), "timeout": len(by[TIMEOUT]),
            "survived": len(by[SURVIVED]) - len(equivalent), "equivalent": len(equivalent),
            "kills": len(kills), "non_equivalent": judged, "clause_named": len(named),
            "kill_rate": _ratio(len(kills), judged), "clause_named_rate": _ratio(len(named), len(kills))}


def _ratio(part: int, whole: int) -> float | None:
    return round(100.0 * part / whole, 1) if whole else None


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}%"


def figure_lines(f: dict[str, Any]) -> list[str]:
    return [f"kill rate: {f['kills']}/{f['non_equivalent']} non-equivalent ({_percent(f['kill_rate'])})",
            f"clause named: {f['clause_named']}/{f['kills']} kills name the clause the mutant breaks ({_percent(f['clause_named_rate'])})"]


def _indented(diff: str) -> list[str]:
    return [_DIFF_INDENT + line for line in diff.rstrip("\n").splitlines()]


def summary_lines(runs: Sequence[ImplRun]) -> list[str]:
    out: list[str] = []
    everything = [r for run in runs for r in run.results]
    for run in runs:
        results = run.results
        f = figures(results)
        out += ["", f"== {run.plan.adapter} ({run.plan.spec}): {f['generated']} mutants run, {f['stillborn']} stillborn, "
                    f"{f['killed']} killed, {f['timeout']} timeout, {f['survived']} survived, {f['equivalent']} argued equivalent"]
        out += _section("survivors (not argued equivalent): each is a change the suite lets through", [
            [f"  {r.mutant.id}  [{r.mutant.function}; expected to break {'/'.join(r.mutant.expected) or 'no clause'}] {r.mutant.description}",
             *_indented(r.mutant.diff)]
            for r in results if r.status == SURVIVED and not r.equivalent])
        out += _section("argued equivalent (survived; why no test can tell them apart)", [
            [f"  {r.mutant.id}  {r.mutant.description}", f"    because: {r.equivalent}"] for r in results if r.status == SURVIVED and r.equivalent])
        out += _section("argued equivalent but killed: the argument is wrong", [
            [f"  {r.mutant.id}  killed by {r.outcome.test}", f"    the argument was: {r.equivalent}"]
            for r in results if r.status in (KILLED, TIMEOUT) and r.equivalent])
        out += _section("stillborn (the mutated module does not import)", [
            [f"  {r.mutant.id}  {r.outcome.message}"] for r in results if r.status == STILLBORN])
        out += _section("argued to break no clause (a kill is right to name none)", [
            [f"  {r.mutant.id}  {r.mutant.description}", f"    because: {r.no_clause}"] for r in results if r.no_clause])
        out += _section("kills naming another clause than the one the mutant breaks (or none)", [
            [f"  {r.mutant.id}  expected {_expected(r)}, named {'/'.join(r.outcome.clauses) or 'no clause'}"
             f" ({r.outcome.test}: {r.outcome.message or ''})"]
            for r in results if r.status in (KILLED, TIMEOUT) and not r.names_expected])
        out += figure_lines(f)
    if len(runs) > 1:
        out += ["", f"== all {len(runs)} implementations"] + figure_lines(figures(everything))
    return out


def _section(title: str, entries: Iterable[list[str]]) -> list[str]:
    entries = list(entries)
    if not entries:
        return []
    return [f"{title}:"] + [line for entry in entries for line in entry]


def report_json(runs: Sequence[ImplRun], *, command: Sequence[str], started: str, wall_s: float) -> dict[str, Any]:
    return {
        "command": list(command), "started": started, "wall_s": round(wall_s, 1),
        "figures": figures([r for run in runs for r in run.results]),
        "implementations": [{
            "impl": run.plan.adapter, "cache_impl": run.plan.spec, "functions": run.plan.functions, "generated": run.plan.generated,
            "baseline_s": round(run.baseline_s, 1), "timeout_s": round(run.timeout_s, 1), "figures": figures(run.results),
            "mutants": [{
                "id": r.mutant.id, "path": r.mutant.path, "line": r.mutant.line, "operator": r.mutant.operator,
                "function": r.mutant.function, "role": r.mutant.role, "description": r.mutant.description,
                "expected": list(r.mutant.expected), "equivalent": r.equivalent, "breaks_no_clause": r.no_clause, "names_expected": r.names_expected,
                "diff": r.mutant.diff, **r.outcome.as_json(),
            } for r in run.results],
        } for run in runs],
    }
