"""Defect entries: the failed tests of a run grouped by cause, one entry per defect, from the report's data alone.

Each failed test carries its causes (conformance/report/causes.py: the clause, the
first deviating event, where the implementation recorded it). Failures are
one defect when they share

- the code they ran: one implementation, or every implementation built from
  one upstream tree or checkout (`--sglang-live PATH`, `--sglang PATH`: their
  classes share that code, and a thread or backend of it fails them alike);
- the clause broken, and
- the cause's signature: the same kind of first deviating event on the same
  pool and space, with the same message once numbers and request ids are
  taken out, or the same background thread dying.

A cause with no event of its own (a multi-rank run's, a configuration
check's) joins the one entry of its clause on the same code, and with none
or several such entries, forms one with the others of its clause there.
Nothing here knows a target: the grouping follows from clause, kind,
signature and the implementations' origins.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from conformance.report.causes import INJECTED, causes_in, what_broke
from spec.clauses import CATALOGUE
from spec.divergences import DIVERGENCES, MARKER, Divergence
from spec.kinds import Kind

SHARED_SOURCES = ("--sglang-live", "--sglang")  # origins whose implementations are classes of one tree


def origin_key(impl: str, implementations: Sequence[Mapping[str, Any]]) -> str:
    """What code an implementation runs: its upstream tree for classes of one, else itself."""
    for entry in implementations:
        if entry.get("name") == impl and entry.get("source") in SHARED_SOURCES and entry.get("source_value"):
            return f"{entry['source']} {entry['source_value']}"
    return impl


def fallback_causes(test: Mapping[str, Any]) -> list[dict]:
    """Causes read from the failure's clause lines alone (a report whose tests carry none: no trace, no site)."""
    return [c.as_json() for c in causes_in("\n".join((test.get("failed_clauses") or {}).values()))]


def verdict_of(clause: str) -> str:
    return "hardening" if CATALOGUE[clause].kind is Kind.HARDENING else "defect"


def _failed(tests: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [t for t in tests if t.get("outcome") == "fail" and t.get("weak") is None]


def _applies(clause: str, impl: str, declarations: Mapping[str, Any]) -> bool:
    """A mechanism of another profile than the implementation declares is not applicable to it (the matrix's `n`): no entry."""
    profile = (declarations.get(impl) or {}).get("profile")
    return profile is None or CATALOGUE[clause].applies_to(profile)


def group(tests: Sequence[Mapping[str, Any]], implementations: Sequence[Mapping[str, Any]] = (),
          declarations: Mapping[str, Any] | None = None) -> tuple[list[dict], list[str]]:
    """(defect entries, defects first, then hardening, then divergences; the failed tests that name no clause)."""
    groups: dict[tuple[str, str, str | None], list[tuple[Mapping[str, Any], dict]]] = {}
    unattributed: list[str] = []
    for test in sorted(_failed(tests), key=lambda t: t["nodeid"]):
        causes = test.get("causes") or fallback_causes(test)
        causes = [c for c in causes if c.get("clause") in CATALOGUE]
        if not causes:
            unattributed.append(test["nodeid"])
        for cause in (c for c in causes if _applies(c["clause"], test["impl"], declarations or {})):
            divergence = _divergence_in(test, cause)
            # One upstream design is one entry per tree, whatever signatures its failures show.
            signature = f"divergence {divergence}" if divergence in DIVERGENCES else cause.get("signature")
            key = (origin_key(test["impl"], implementations), cause["clause"], signature)
            groups.setdefault(key, []).append((test, cause))
    for (source, clause, sig) in [k for k in groups if k[2] is None]:
        evidenced = [k for k in groups if k[:2] == (source, clause) and k[2] is not None]
        if len(evidenced) == 1:
            groups[evidenced[0]] += groups.pop((source, clause, sig))
    entries = [_entry(clause, members, _divergence_of(sig)) for (_source, clause, sig), members in groups.items()]
    order = {c: i for i, c in enumerate(CATALOGUE)}
    rank = {"defect": 0, "hardening": 1, "divergence": 2}
    entries.sort(key=lambda e: (rank[e["verdict"]], order[e["clause"]], -len(e["tests"]), e["implementations"]))
    _name(entries)
    return entries, unattributed


def _representative(members: Sequence[tuple[Mapping[str, Any], dict]]) -> dict:
    """The cause that says most with least: one a deployment's own data triggered (not an injected exception) first,
    then one with an excerpt and a site, then the shortest line."""
    return min((cause for _t, cause in members), key=lambda c: (INJECTED in c.get("line", ""), not c.get("excerpt"), not c.get("sites"),
                                                               len(c.get("line", "")), c.get("line", "")))


def _divergence_in(test: Mapping[str, Any], cause: Mapping[str, Any]) -> str | None:
    """The divergence a failure's cause is: its clause's, or, when every clause the test failed is that one divergence
    (an L2 whose cause is the D5 vote behind it), the one its cause line marks."""
    divergent = test.get("divergent_clauses") or {}
    if cause["clause"] in divergent:
        return divergent[cause["clause"]]
    ids = set(divergent.values())
    found = MARKER.search(cause.get("line", ""))
    if found and ids == {found.group(1)} and set(divergent) == set(test.get("failed_clauses") or {}):
        return found.group(1)
    return None


def _divergence_of(signature: str | None) -> Divergence | None:
    return DIVERGENCES.get(signature.removeprefix("divergence ")) if signature and signature.startswith("divergence ") else None


def divergence_json(d: Divergence) -> dict:
    return {"id": d.id, "title": d.title, "spec_rule": d.spec_rule, "upstream_rule": d.upstream_rule,
            "upstream_evidence": list(d.upstream_evidence), "spec_evidence": list(d.spec_evidence)}


def _entry(clause: str, members: Sequence[tuple[Mapping[str, Any], dict]], divergence: Divergence | None = None) -> dict:
    c = CATALOGUE[clause]
    best = _representative(members)
    tests: dict[str, dict] = {}
    sites: dict[str, list[str]] = {}
    schedules: list[dict] = []
    also: list[str] = []
    for test, cause in members:
        tests.setdefault(test["nodeid"], {"nodeid": test["nodeid"], "impl": test["impl"], "device": test.get("device")})
        for site in cause.get("sites") or []:
            if site not in sites.setdefault(test["impl"], []):
                sites[test["impl"]].append(site)
        if cause.get("schedule") and all(s["nodeid"] != test["nodeid"] for s in schedules):
            schedules.append({"nodeid": test["nodeid"], "impl": test["impl"], **cause["schedule"]})
        also += [a for a in cause.get("also") or [] if a not in also]
    impls = sorted({t["impl"] for t in tests.values()})
    return {
        "id": clause, "clause": clause, "kind": c.kind.value, "title": c.title,
        "verdict": "divergence" if divergence else verdict_of(clause),
        "divergence": divergence_json(divergence) if divergence else None,
        "implementations": impls, "sentence": MARKER.sub("", sentence_of(best)).strip(), "also": also, "signature": best.get("signature"),
        "thread": best.get("thread"), "event": best.get("event"), "sites": sites, "excerpt": list(best.get("excerpt") or []),
        "tests": sorted(tests.values(), key=lambda t: t["nodeid"]), "schedules": schedules, "repro": None,
    }


def sentence_of(cause: Mapping[str, Any]) -> str:
    """What went wrong, from the cause's line: without its clause label, its context and the event it ends with."""
    clauses = [cause["clause"], *(cause.get("also") or [])]
    return what_broke(cause.get("line", ""), clauses) if "/".join(clauses) + ": " in cause.get("line", "") else what_broke(cause.get("line", ""), clauses[:1])


def _name(entries: list[dict]) -> None:
    """Ids a reader can type: the clause, numbered when it names several entries (L5-1, L5-2)."""
    counts: dict[str, int] = {}
    for entry in entries:
        counts[entry["clause"]] = counts.get(entry["clause"], 0) + 1
    seen: dict[str, int] = {}
    for entry in entries:
        clause = entry["clause"]
        if counts[clause] > 1:
            seen[clause] = seen.get(clause, 0) + 1
            entry["id"] = f"{clause}-{seen[clause]}"


def defects_of(data: Mapping[str, Any]) -> dict:
    """The report's `defects` part: {entries, naming_no_clause}."""
    entries, unattributed = group(data.get("tests", []), data.get("implementations", []), data.get("declarations"))
    return {"entries": entries, "naming_no_clause": unattributed}
