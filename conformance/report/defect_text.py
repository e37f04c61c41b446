"""A defect entry in words, the same in the terminal, the Markdown and the HTML report."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

VERDICT_LETTER = {"defect": "D", "hardening": "H"}
SECTIONS = (("defect", "Defects"), ("hardening", "Hardening not met"))
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


def test_names(entry: Mapping[str, Any]) -> Sequence[str]:
    return [t["nodeid"] for t in entry["tests"]]
