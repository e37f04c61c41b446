"""A defect entry in words, the same in the terminal, the Markdown and the HTML report; and an early stop of the run."""

from __future__ import annotations

import shlex
from typing import Any, Mapping

# Left out of a rerun: it must not overwrite the run's report or scripts, and it selects its own clause.
RERUN_DROPS = ("--conformance-report", "--conformance-repro", "--clause")
VERDICT_LETTER = {"defect": "D", "hardening": "H", "divergence": "V"}
SECTIONS = (("defect", "Defects"), ("hardening", "Hardening not met"), ("divergence", "Divergences by design (not defects)"))
MAX_SENTENCE = 160


def bounded(text: str, limit: int = MAX_SENTENCE) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def entries(data: Mapping[str, Any], verdict: str | None = None) -> list[Mapping[str, Any]]:
    found = (data.get("defects") or {}).get("entries", [])
    return [e for e in found if verdict is None or e["verdict"] == verdict]


def impls(entry: Mapping[str, Any]) -> str:
    return ", ".join(entry["implementations"])


def headline(entry: Mapping[str, Any]) -> str:
    """'S3 (safety: Slots end exactly once)'."""
    return f"{entry['id']} ({entry['kind']}: {entry['title']})"


def count(entry: Mapping[str, Any]) -> str:
    n = len(entry["tests"])
    return f"{n} test{'s' if n != 1 else ''}"


def innermost_site(entry: Mapping[str, Any]) -> str | None:
    """Where the first implementation's code recorded the deviating event (its innermost frame)."""
    for sites in entry.get("sites", {}).values():
        if sites:
            return sites[0].split(" < ")[0]
    return None


def where_lines(entry: Mapping[str, Any]) -> list[str]:
    """One line per implementation and site: 'impl: path:line (function) < caller'."""
    lines = [f"{impl}: {site}" for impl, sites in entry.get("sites", {}).items() for site in sites]
    if entry.get("thread"):
        lines.append(f"background thread: {entry['thread']}")
    return lines


def repro_words(entry: Mapping[str, Any]) -> str | None:
    """What --conformance-repro wrote for the entry; None when the run did not ask for scripts."""
    repro = entry.get("repro")
    if repro is None:
        return None
    if not repro.get("path"):
        return repro.get("why") or "no standalone replay"
    statuses = sorted({t.get("status", "") for t in repro.get("targets", {}).values()})
    return f"python {repro['path']} ({', '.join(statuses)})"


def terminal_line(entry: Mapping[str, Any]) -> str:
    site = innermost_site(entry)
    words = repro_words(entry)
    repro = f"; repro: {words}" if words and entry.get("repro", {}).get("path") else ""
    return (f"{entry['id']} {entry['kind']}: {bounded(entry['sentence'])} [{impls(entry)}; {count(entry)}"
            + (f"; at {site}" if site else "") + f"]{repro}")


def divergence_lines(entry: Mapping[str, Any]) -> list[str]:
    """Both sides of a divergence entry, each with its evidence; nothing for a defect."""
    d = entry.get("divergence")
    if not d:
        return []
    return [f"divergence {d['id']}: {d['title']}",
            f"upstream's design: {d['upstream_rule']} ({'; '.join(d['upstream_evidence'])})",
            f"the spec's rule: {d['spec_rule']} ({'; '.join(d['spec_evidence'])})"]


def rerun_command(entry: Mapping[str, Any], data: Mapping[str, Any]) -> str:
    """The run's own command, narrowed to the tests citing the entry's clause."""
    args: list[str] = []
    skip_value = False
    for arg in data.get("run", {}).get("pytest_args", []):
        if skip_value:
            skip_value = False
            continue
        if arg.split("=", 1)[0] in RERUN_DROPS:
            skip_value = "=" not in arg
            continue
        args.append(arg)
    return "pytest " + shlex.join([*args, "--clause", entry["clause"]])


def interruption(data: Mapping[str, Any]) -> str | None:
    """The sentence an interrupted run's report opens with; None for a run that reached its end."""
    why = data.get("run", {}).get("interrupted")
    if not why:
        return None
    n = len(data.get("tests", []))
    return (f"The run was interrupted ({why}): its verdicts cover only the {n} test{'s' if n != 1 else ''} that ran; "
            "a pass, or no defect, says nothing of the tests it did not reach.")
