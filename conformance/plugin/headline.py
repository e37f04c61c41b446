"""A failed test's pytest output leads with its causes: the clause, its kind, the one sentence, where.

pytest shows a failure as its traceback, then the exception; for upstream's
live objects that is a long way down through the harness and upstream's
threads before the clause appears. Each cause (conformance/report/causes.py) becomes
one line put before the traceback (a native entry, which xdist carries as
is), and the short summary line (`FAILED test - ...`) says the first. The
harness's own frames are hidden from the traceback (`__tracebackhide__`);
the implementation's are kept.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from conformance.report.causes import cause_property, causes_json
from conformance.report.failures import failure_properties
from spec.clauses import CATALOGUE

MAX_SENTENCE = 200


def headline(cause: Mapping[str, Any]) -> str:
    """'S3 (safety: Slots end exactly once): freed while IO 7 ... [at sglang/...:1397 (prefetch_abort)]'."""
    from conformance.report.defects import sentence_of

    clause = CATALOGUE[cause["clause"]]
    text = " ".join(sentence_of(cause).split())
    text = text if len(text) <= MAX_SENTENCE else text[: MAX_SENTENCE - 3] + "..."
    also = f" (also {', '.join(cause['also'])})" if cause.get("also") else ""
    site = (cause.get("sites") or [""])[0].split(" < ")[0]
    return f"{clause.id} ({clause.kind.value}: {clause.title}){also}: {text}" + (f" [at {site}]" if site else "")


def lead_with_causes(report: Any, causes: Sequence[Mapping[str, Any]]) -> None:
    """Put one line per cause before a failed report's traceback, and the first in its short summary."""
    lines = [headline(c) for c in causes if c.get("clause") in CATALOGUE]
    if not lines:
        return
    longrepr = report.longrepr
    if isinstance(longrepr, str):
        report.longrepr = "\n".join(lines) + "\n\n" + longrepr
        return
    chain = getattr(longrepr, "chain", None)
    traceback = chain[0][0] if chain else getattr(longrepr, "reprtraceback", None)
    entries = getattr(traceback, "reprentries", None)
    if entries is None:
        return
    from _pytest._code.code import ReprEntryNative

    entries.insert(0, ReprEntryNative([line + "\n" for line in lines]))  # the traceback that follows opens with a blank line
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None and getattr(crash, "message", None) is not None:
        crash.message = lines[0]


def annotate_failure(report: Any, excinfo: Any, item: Any) -> None:
    """A failed phase's report: the clauses its failure names and its causes (for the report), and its headline."""
    causes = causes_json(excinfo.value, item)
    death = next((c["line"] for c in causes if c.get("clause") == "L5"), None)  # causes_in: a thread's death is the one cause
    report.user_properties = [*report.user_properties, *failure_properties(excinfo, death), cause_property(causes)]
    try:
        lead_with_causes(report, causes)
    except Exception:  # a headline must never cost the failure its report
        pass
