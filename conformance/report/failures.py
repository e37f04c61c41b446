"""Which clauses a failed test names: the clause whose rule broke, read from its failure message.

Every check in this harness words a failure as "<clause>: what broke" (or
"<clause>/<clause>: ..." when one observation breaks two rules), and the
spec's trace checker words its violations the same way. A failed test
"names" exactly the catalogue's clause IDs found in that position in its
exception message. Source lines quoted inside a traceback (a rank's error
from a multi-rank run carries one) are skipped: they show code, not what
broke. The result travels in the test report's user_properties, so the
xdist controller builds the same matrix a single process does.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterable, Mapping

from spec.clauses import CATALOGUE
from spec.divergences import DIVERGENCES, MARKER

PROP_FAILED = "conformance.failed_clauses"  # user property: JSON {clause: first message line naming it}
PROP_DIVERGENT = "conformance.divergent_clauses"  # user property: JSON {clause: divergence id}, see divergent_clauses

CLAUSE_LABEL = re.compile(r"(?<![A-Za-z0-9_])((?:[A-Z][0-9]+/)*[A-Z][0-9]+): ")
_MAX_LINE = 240
# A check that raised once a background thread had died, where the trace already showed a rule broken before
# (conformance/scenarios/workload.py, checked_progress): that rule, then the death.
BROKEN_BEFORE_DEATH = re.compile(r"^([A-Z][0-9]+): [^\n]*\(then a check of ")


def message_lines(message: str) -> Iterable[str]:
    """The lines of a failure message, without the source lines a quoted traceback shows."""
    skip_next = False
    for line in message.splitlines():
        if skip_next:
            skip_next = False
            continue
        stripped = line.strip()
        if stripped.startswith('File "') and ", line " in stripped:
            skip_next = True  # the next line is the source of that frame
            continue
        if stripped.startswith("Traceback (most recent call last)"):
            continue
        yield line


def named_clauses(message: str) -> dict[str, str]:
    """{clause: the first message line naming it}, in order of first mention."""
    found: dict[str, str] = {}
    for line in message_lines(message):
        for match in CLAUSE_LABEL.finditer(line):
            for clause in match.group(1).split("/"):
                if clause in CATALOGUE and clause not in found:
                    text = line.strip()
                    found[clause] = text if len(text) <= _MAX_LINE else text[: _MAX_LINE - 3] + "..."
    return found


def divergent_clauses(message: str) -> dict[str, str]:
    """{clause: divergence id} for the clauses every line naming which marks one same divergence (spec/divergences.py)."""
    seen: dict[str, set[str | None]] = {}
    for line in message_lines(message):
        found = MARKER.search(line)
        for match in CLAUSE_LABEL.finditer(line):
            for clause in match.group(1).split("/"):
                if clause in CATALOGUE:
                    seen.setdefault(clause, set()).add(found.group(1) if found and found.group(1) in DIVERGENCES else None)
    return {clause: ids.pop() for clause, ids in seen.items() if len(ids) == 1 and None not in ids}


def failure_properties(excinfo: Any, death: str | None = None) -> list[tuple[str, str]]:
    """The user property a failed phase's report carries: what its exception names (possibly nothing).

    `death`: the line of a background thread's death the failure's causes found
    (L5). What the test then saw (slots it stranded, a wait that never ended)
    is that death's consequence, so the failure names L5 alone, whatever check
    raised first; unless the trace showed a rule broken before the death
    (checked_progress's "<clause>: ... (then a check of ... raised"): that rule
    is the death's cause, named first, with L5 beside it.
    """
    if excinfo is None:
        return []
    try:
        message = str(excinfo.value)
    except Exception:  # a broken __str__ must not hide the failure
        message = ""
    if death is not None:
        cause = BROKEN_BEFORE_DEATH.match(message)
        named = {cause.group(1): message.splitlines()[0][:_MAX_LINE]} if cause and cause.group(1) in CATALOGUE else {}
        return [(PROP_FAILED, json.dumps({**named, "L5": death})), (PROP_DIVERGENT, json.dumps({}))]
    return [(PROP_FAILED, json.dumps(named_clauses(message))), (PROP_DIVERGENT, json.dumps(divergent_clauses(message)))]


def read_failed(user_properties: Iterable[Any]) -> dict[str, str] | None:
    """{clause: line} from a report's properties; None when the report carries none."""
    for pair in user_properties:
        if len(pair) == 2 and pair[0] == PROP_FAILED:
            value = json.loads(pair[1])
            return dict(value) if isinstance(value, Mapping) else {}
    return None


def read_divergent(user_properties: Iterable[Any]) -> dict[str, str]:
    """{clause: divergence id} from a report's properties (empty when it carries none)."""
    for pair in user_properties:
        if len(pair) == 2 and pair[0] == PROP_DIVERGENT:
            value = json.loads(pair[1])
            return dict(value) if isinstance(value, Mapping) else {}
    return {}
