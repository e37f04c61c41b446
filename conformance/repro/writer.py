"""The session's end with --conformance-repro DIR: per defect entry, its case, shrunk, written as a script and checked.

Runs in the process that builds the report, after the last test. An
exploration case is shrunk first (shrink.py) with the run's own adapter.
Every script is then checked in this process: each target's replay runs
through the same runtime the script uses, on the implementation rebuilt from
the script's own source, and the entry records what it said (`repro`: the
path, per target the case and the verdict). An entry with no standalone case
says why, and gets no script.
"""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

from conformance.scenarios.catalogue import Scenario
from conformance.repro.cases import Case, cases_for, implementation_source, why_none
from conformance.repro.runtime import REPRODUCED, replay_once, verdict_line
from conformance.repro.script import file_name, render
from conformance.repro.shrink import shrink
from conformance.repro.standalone import load_adapter


def scenario_of(fields: Mapping[str, Any]) -> Scenario:
    fields = dict(fields)
    if fields.get("extra_pools") is not None:
        fields["extra_pools"] = tuple(fields["extra_pools"])
    return Scenario(**fields)


def _shrunk(case: Case, adapter: Any, clause: str) -> Case:
    if case.kind != "exploration" or adapter is None:
        return case
    found = shrink(adapter, scenario_of(case.fields["scenario"]), case.fields["schedule"], clause)
    if found is None:
        return case
    return replace(case, fields={**case.fields, "schedule": found.schedule, "found": case.fields["schedule"]})


def _load_script(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"conformance_repro_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def check_script(path: Path, clause: str) -> dict[str, dict]:
    """Each target of the written script, replayed as the script would: {impl: {status, line}}."""
    module = _load_script(path)
    out = {}
    for name, source, replay in module.TARGETS:
        try:
            adapter = load_adapter(**source)
        except Exception as exc:
            out[name] = {"status": "not built", "line": f"{name}: could not be built: {' '.join(str(exc).split())}"}
            continue
        status, line = verdict_line(name, clause, replay_once(adapter, replay))
        out[name] = {"status": "reproduces" if status == REPRODUCED else ("gone" if status == 0 else "fails otherwise"), "line": line}
    return out


def write_repros(data: dict, directory: str | Path, adapters: Mapping[str, Any]) -> list[Path]:
    """Scripts for data['defects'] entries into `directory`; each entry's `repro` says what was written and what it did."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    meta = {"suite": f"{data['suite']['name']} {data['suite'].get('version') or ''}, commit {(data['suite'].get('commit') or 'unknown')[:12]}",
            "started": data["run"]["started"]}
    written = []
    for entry in data["defects"]["entries"]:
        cases = {impl: _shrunk(case, adapters.get(impl), entry["clause"]) for impl, case in cases_for(entry, data).items()}
        if not cases:
            entry["repro"] = {"path": None, "why": why_none(entry), "targets": {}}
            continue
        sources = {impl: implementation_source(impl, data["implementations"]) for impl in cases}
        path = folder / file_name(entry)
        path.write_text(render(entry, cases, sources, meta, path.name), encoding="utf-8")
        path.chmod(0o755)
        written.append(path)
        checked = check_script(path, entry["clause"])
        entry["repro"] = {"path": str(path), "why": None, "targets": {
            impl: {"kind": case.kind, "schedule": case.fields.get("schedule"), "scenario": (case.fields.get("scenario") or {}).get("name"),
                   "from": case.source, **checked.get(impl, {"status": "not checked", "line": ""})}
            for impl, case in cases.items()}}
    return written
