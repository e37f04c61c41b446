"""Which case of a defect entry replays outside pytest, per implementation; and why none does.

Three kinds of case replay standalone, each from data the run recorded:

- an exploration schedule: the scenario's fields and the schedule that
  failed (conformance/scenarios/explore.py replays it; shrink.py makes it
  smaller), or a cross-rank one (conformance/multirank/explore/ replays it
  on real ranks);
- a decision-table state: the row where the implementation's decision or
  vote differs from its profile's (the test's `decision_table` rows);
- a storage error: the pool and direction of the transfer whose injected
  fault ended a background thread (the line of the entry's L5 cause);
- foreign pages: the one respect (dtype, layout, page size) in which a
  reader's pages differed from a writer's sharing its storage (S6's line).

Everything else (gated windows, other faults, configuration checks,
multi-rank runs) has no standalone replay yet: the entry says so, naming the
tests that show it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from conformance.report.causes import event_of
from conformance.report.defects import fallback_causes
from spec.trace import BACKUP, LOAD

FOREIGN = re.compile(r"differ from the writer's only in (dtype_same_width|dtype|model|layout|page_size)\b")

@dataclass(frozen=True)
class Case:
    kind: str  # "exploration" | "crossrank" | "decision" | "storage_error" | "foreign_pages"
    fields: Mapping[str, Any] = field(default_factory=dict)
    source: str = ""  # the test it came from

    def sort_key(self) -> tuple:
        if self.kind in ("exploration", "crossrank"):
            s = self.fields["scenario"]
            return (0, s["kv_batches"], s["ticks"] + s["aborts"], s["kv_batches"] * s["batch_pages"], len(self.fields["schedule"].split(",")), self.source)
        return (("decision", "storage_error", "foreign_pages").index(self.kind) + 1, self.source)


def implementation_source(impl: str, implementations: Any) -> dict | None:
    """How a script rebuilds `impl`: the factory string, or the tree and class (None: it cannot)."""
    for entry in implementations:
        if entry.get("name") != impl:
            continue
        if entry.get("source") == "--sglang-live":
            return {"sglang_live": entry["source_value"], "name": impl}
        if entry.get("source") == "--sglang":
            return {"sglang": entry["source_value"], "name": impl}
        if entry.get("factory"):
            return {"cache_impl": entry["factory"]}
    return None


def _exploration(entry: Mapping[str, Any], impl: str) -> list[Case]:
    # A cross-rank scenario (conformance/multirank/explore/) names its ranks; the single-rank explorer's does not.
    return [Case("crossrank" if "world_size" in s["scenario"] else "exploration", {"scenario": s["scenario"], "schedule": s["schedule"]},
                 s["nodeid"]) for s in entry.get("schedules", []) if s["impl"] == impl]


def _decision(entry: Mapping[str, Any], impl: str, data: Mapping[str, Any]) -> list[Case]:
    clauses = {entry["clause"], *entry.get("also", [])}
    out = []
    for device, table in data.get("decision_table", {}).get(impl, {}).items():
        for row in table.get("rows", []):
            if row["clause"] in clauses:
                out.append(Case("decision", {"row": row, "device": device}, f"decision table ({device})"))
    # A wrong decision first, then a wrong vote alone; an operation with a hit before one without.
    return sorted(out, key=lambda c: (c.fields["row"]["got_decision"] == c.fields["row"]["expected_decision"], c.fields["row"]["state"]["hit_pages"] == 0))


def _storage_error(entry: Mapping[str, Any], impl: str, data: Mapping[str, Any]) -> list[Case]:
    if entry["clause"] != "L5" or not entry.get("thread"):
        return []
    out = []
    for nodeid, line in _lines_of(entry, impl, data):
        event = event_of(line) if "injected fault" in line else None
        # Any rank's: one process replays it, and the thread it killed runs on every rank.
        if event and event["kind"] == "io_start" and event.get("value") in (LOAD, BACKUP) and event.get("pool"):
            out.append(Case("storage_error", {"pool": event["pool"], "direction": event["value"]}, nodeid))
    return out


def _lines_of(entry: Mapping[str, Any], impl: str, data: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(nodeid, cause line) of the entry's tests on `impl`."""
    nodeids = {t["nodeid"] for t in entry["tests"] if t["impl"] == impl}
    return [(test["nodeid"], cause.get("line", "")) for test in data.get("tests", []) if test["nodeid"] in nodeids
            for cause in test.get("causes") or fallback_causes(test)]


def _foreign_pages(entry: Mapping[str, Any], impl: str, data: Mapping[str, Any]) -> list[Case]:
    if entry["clause"] != "S6":
        return []
    found = [(nodeid, FOREIGN.search(line)) for nodeid, line in _lines_of(entry, impl, data)]
    return [Case("foreign_pages", {"differs": match.group(1)}, nodeid) for nodeid, match in found if match]


def cases_for(entry: Mapping[str, Any], data: Mapping[str, Any]) -> dict[str, Case]:
    """{implementation: the smallest case that replays its part of the entry}; implementations without one are left out."""
    out = {}
    for impl in entry["implementations"]:
        if implementation_source(impl, data.get("implementations", [])) is None:
            continue
        found = _exploration(entry, impl) or _decision(entry, impl, data) or _storage_error(entry, impl, data) or _foreign_pages(entry, impl, data)
        if found:
            out[impl] = min(found, key=Case.sort_key)
    return out


def why_none(entry: Mapping[str, Any]) -> str:
    names = sorted({t["nodeid"].split("::")[-1].split("[")[0] for t in entry["tests"]})
    return ("no standalone replay yet for the tests that show it (" + ", ".join(names) + "): scripts replay exploration "
            "schedules, decision-table states, storage errors that end a background thread and pages of another configuration")
