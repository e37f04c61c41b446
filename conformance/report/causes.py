"""What caused one failed test: the clause broken, the first deviating event, where the implementation did it.

Worked out in the process that ran the test, at the moment its failure is
reported, from what only that process has: the exception, the traces the
test's caches recorded (conformance/report/sites.py tells where each event came
from) and the caches themselves. The result travels in the report's
user_properties (PROP_CAUSES, JSON), so the xdist controller groups failures
into defect entries (conformance/report/defects.py) from data alone.

One failure has one cause per observation its message labels ("S3: ...";
"D5/L2: ..." is one observation breaking two rules), found in this order:

1. A background thread of the implementation died: the death is the cause
   (L5), whatever the test then saw (a wait that never ended, leaked slots),
   unless the failure's line of another clause quotes the death as what
   followed from it.
2. The trace shows a wrong decision (spec clauses D, X1): a liveness failure
   (L1, L2) or a decision failure is caused by the first such vote.
3. Otherwise each labelled clause, with the event its line names
   ("at #31 free rank 0 ..."), looked up in the trace for its site.

A cause's signature is what makes two failures one defect: the clause, the
kind of event and the pool and space it touched, and the message with its
numbers and request ids taken out. A cause with no event has none; the
grouping decides where it belongs.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import pytest

from conformance.report import sites as event_sites
from conformance.report.failures import CLAUSE_LABEL, message_lines
from spec.clauses import CATALOGUE

INJECTED = "InjectedFault"  # the harness's own exception (conformance/gates.py): a trigger no deployment raises

PROP_CAUSES = "conformance.report.causes"  # user property: JSON list of Cause.as_json()
_OBSERVED = pytest.StashKey[list]()  # per test item: [(trace, termination config, cache)] in the order made
KEEP_OBSERVED = 4  # an exploration makes one cache per schedule: the failing one is the last
EXCERPT_BEFORE = 3
MAX_TEXT = 240
LIVENESS_FROM_DECISION = ("L1", "L2")

_EVENT = re.compile(r" at #(?P<seq>\d+) (?P<kind>[a-z_]+) rank (?P<rank>\d+)(?P<rest>.*)$")
_FIELD = re.compile(r"\b(op|pool|space|value) ('[^']*'|\S+)")
_REFERENCE = re.compile(r"#(\d+)\b")
_IO_REFERENCE = re.compile(r"\bIO (\d+)\b")
_THREAD = re.compile(r"\b([A-Za-z_]\w*_thread|[A-Za-z_]\w* thread)\b")


@dataclass
class Cause:
    clause: str
    line: str  # the message line labelling it
    also: list[str] = field(default_factory=list)  # clauses the same observation broke
    signature: str | None = None
    event: str | None = None  # the first deviating event, described
    sites: list[str] = field(default_factory=list)  # where the implementation recorded it
    excerpt: list[str] = field(default_factory=list)  # the trace around it, with sites
    thread: str | None = None  # the background thread whose death it is
    schedule: dict | None = None  # exploration: the scenario's fields and the failing schedule

    def as_json(self) -> dict:
        return dataclasses.asdict(self)


def _bounded(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 3] + "..."


# --- what the test's caches recorded ----------------------------------------------------------

def observe(node: Any, trace: Any, termination: Any, cache: Any) -> None:
    """Called by make_cache for each cache a test makes: its trace remembers sites, and the test remembers it."""
    event_sites.attach(trace)
    found = node.stash.setdefault(_OBSERVED, [])
    found.append((trace, termination, cache))
    del found[:-KEEP_OBSERVED]


def forget(node: Any) -> None:
    """After the test's last phase: its caches and traces are no longer needed (a session holds thousands of tests)."""
    node.stash[_OBSERVED] = []


def observed(node: Any) -> list[tuple[Any, Any, Any]]:
    return list(node.stash.get(_OBSERVED, [])) if node is not None else []


# --- reading the message ----------------------------------------------------------------------

def labelled_lines(message: str) -> list[tuple[list[str], str]]:
    """[(clauses of one label, the line)], the first line per leading clause, in order."""
    out: list[tuple[list[str], str]] = []
    seen: set[str] = set()
    for line in message_lines(message):
        line = line.strip()
        for match in CLAUSE_LABEL.finditer(line):
            group = [c for c in match.group(1).split("/") if c in CATALOGUE]
            if group and group[0] not in seen:
                seen.add(group[0])
                out.append((group, line))
    return out


def event_of(line: str) -> dict | None:
    """The event a line names ('... at #31 free rank 0 op x pool mamba space host slots [1]'), as fields."""
    match = _EVENT.search(line)
    if match is None:
        return None
    fields = {name: value.strip("'") for name, value in _FIELD.findall(match.group("rest"))}
    return {"seq": int(match.group("seq")), "kind": match.group("kind"), "rank": int(match.group("rank")), **fields}


def template(text: str, ops: Iterable[str] = ()) -> str:
    """A message without what differs between two runs of one defect: numbers, request ids, quoted values."""
    for op in sorted({o for o in ops if o}, key=len, reverse=True):
        text = re.sub(rf"(?<![\w-]){re.escape(op)}(?![\w-])", "<op>", text)
    text = re.sub(r"'[^']*'", "'…'", text)
    return re.sub(r"\d+(\.\d+)?", "#", text)


def what_broke(line: str, clauses: Sequence[str]) -> str:
    """The line from its label on, without the label and without the event description that ends it."""
    label = "/".join(clauses) + ": "
    text = line[line.find(label) + len(label):] if label in line else line
    match = _EVENT.search(text)
    return _bounded(text[: match.start()] if match else text)


def signature(clause: str, text: str, event: dict | None) -> str | None:
    if event is None:
        return None
    where = " ".join(str(event[k]) for k in ("pool", "space") if event.get(k))
    direction = f" {event['value']}" if event["kind"] in ("io_start", "io_end") and event.get("value") else ""
    return f"{clause} {event['kind']}{(' ' + where) if where else ''}{direction}: {template(text, [event.get('op', '')])}"


# --- the trace ------------------------------------------------------------------------------

def _find(observations: Sequence[tuple[Any, Any, Any]], event: dict) -> tuple[Any, Any] | None:
    """(trace, the event) for an event a line names, most recent trace first."""
    for trace, _config, _cache in reversed(observations):
        events = trace.events()
        if event["seq"] < len(events):
            found = events[event["seq"]]
            if found.kind.value == event["kind"] and found.rank == event["rank"]:
                return trace, found
    return None


def excerpt(trace: Any, event: Any, line: str = "") -> list[str]:
    """The events just before `event`, it, and the events its line refers to (#N, IO N), each with its site."""
    events = trace.events()
    where = event_sites.sites(trace)
    wanted = set(range(max(0, event.seq - EXCERPT_BEFORE), event.seq + 1))
    wanted |= {int(n) for n in _REFERENCE.findall(line) if int(n) < len(events)}
    ios = {int(n) for n in _IO_REFERENCE.findall(line)}
    wanted |= {e.seq for e in events if e.io in ios and e.kind.value == "io_start"}
    out = []
    for seq in sorted(wanted):
        e = events[seq]
        mark = ">> " if seq == event.seq else "   "
        out.append(mark + e.describe() + (f"  [{where[seq]}]" if seq in where else ""))
    return out


def first_wrong_decision(observations: Sequence[tuple[Any, Any, Any]]) -> tuple[Any, Any] | None:
    """(trace, violation) of the earliest vote or combine that deviates from the spec, over the test's traces."""
    from spec.invariants import check

    for trace, config, _cache in reversed(observations):
        if config is None:
            continue
        try:
            violations = check(trace.trace(), config, clauses=["D", "X1"], closed=False)
        except Exception:  # a trace the checker cannot read says nothing about the cause
            continue
        timed = [v for v in violations if v.event is not None]
        if timed:
            return trace, min(timed, key=lambda v: v.event.seq)
    return None


def thread_deaths(message: str, observations: Sequence[tuple[Any, Any, Any]]) -> list[str]:
    """L5 lines: what the test's caches report of their background threads, else what its message says."""
    from conformance.oracles.lifecycle import background_errors

    lines: list[str] = []
    for _trace, _config, cache in observations:
        try:
            lines += background_errors(cache)
        except Exception:
            continue
    lines += [line for clauses, line in labelled_lines(message) if clauses[0] == "L5"]
    return list(dict.fromkeys(lines))


# --- one failure ----------------------------------------------------------------------------

def exploration_of(error: BaseException) -> dict | None:
    """The scenario's fields and the failing schedule of an exploration failure (explore.ExplorationError)."""
    scenario, schedule = getattr(error, "scenario", None), getattr(error, "schedule", None)
    if scenario is None or schedule is None or not dataclasses.is_dataclass(scenario):
        return None
    return {"scenario": dataclasses.asdict(scenario), "schedule": str(schedule)}


def causes_of(error: BaseException, node: Any = None) -> list[Cause]:
    try:
        message = str(error)
    except Exception:  # a broken __str__ must not hide the failure
        return []
    return causes_in(message, observed(node), exploration_of(error))


def causes_in(message: str, observations: Sequence[tuple[Any, Any, Any]] = (), schedule: dict | None = None) -> list[Cause]:
    """The causes of a failure with this message, given what the test's caches recorded (maybe nothing)."""
    deaths = thread_deaths(message, observations)
    labelled = labelled_lines(message)
    if deaths and not _said_as_consequence(deaths[0], labelled):
        return [_death(deaths[0], schedule)]
    decision = first_wrong_decision(observations) if labelled else None
    out: list[Cause] = []
    for clauses, line in labelled:
        cause = _decision(decision, clauses, line) if decision and _from_decision(clauses[0]) else _labelled(clauses, line, observations)
        if all(cause.clause != c.clause or cause.signature != c.signature for c in out):
            cause.schedule = schedule
            out.append(cause)
    return out


def _said_as_consequence(death: str, labelled: Sequence[tuple[Sequence[str], str]]) -> bool:
    """The failure's own line of another clause quotes the death: the test saw the cause first and the thread died of
    it after (released past a close that returned while it ran), so that clause is the cause and the death beside it."""
    return any(clauses[0] != "L5" and death in line for clauses, line in labelled)


def _from_decision(clause: str) -> bool:
    return clause in LIVENESS_FROM_DECISION or CATALOGUE[clause].group in ("D", "X")


def _death(line: str, schedule: dict | None) -> Cause:
    text = line.rsplit("L5: ", 1)[-1]  # a multi-rank message quotes a rank's line after its own
    match = _THREAD.search(text)
    thread = match.group(1) if match else None
    return Cause("L5", _bounded("L5: " + text), signature=f"L5 thread {thread}" if thread else f"L5: {template(_bounded(text))}",
                 thread=thread, schedule=schedule)


def _decision(found: tuple[Any, Any], clauses: Sequence[str], line: str) -> Cause:
    trace, violation = found
    text = str(violation)
    event = violation.event
    fields = {"seq": event.seq, "kind": event.kind.value, "rank": event.rank, "op": event.op}
    also = [c for c in clauses if c != violation.clause]
    site = event_sites.sites(trace).get(event.seq)
    return Cause(violation.clause, _bounded(text), also=also, signature=signature(violation.clause, violation.message, fields),
                 event=event.describe(), sites=[site] if site else [], excerpt=excerpt(trace, event, text))


def _labelled(clauses: Sequence[str], line: str, observations: Sequence[tuple[Any, Any, Any]]) -> Cause:
    clause = clauses[0]
    event = event_of(line)
    cause = Cause(clause, _bounded(line), also=list(clauses[1:]), signature=signature(clause, what_broke(line, clauses), event))
    found = _find(observations, event) if event is not None else None
    if found is not None:
        trace, recorded = found
        site = event_sites.sites(trace).get(recorded.seq)
        cause.event, cause.sites, cause.excerpt = recorded.describe(), [site] if site else [], excerpt(trace, recorded, line)
    elif event is not None:
        cause.event = line[line.find(" at #") + 4:]
    return cause


def causes_json(error: BaseException, node: Any = None) -> list[dict]:
    """causes_of, as the report carries them; none when working them out failed (that must never hide the failure)."""
    try:
        return [c.as_json() for c in causes_of(error, node)]
    except Exception:
        return []


def cause_property(causes: Sequence[dict]) -> tuple[str, str]:
    return (PROP_CAUSES, json.dumps(list(causes)))


def read_causes(user_properties: Iterable[Any]) -> list[dict] | None:
    for pair in user_properties:
        if len(pair) == 2 and pair[0] == PROP_CAUSES:
            value = json.loads(pair[1])
            return list(value) if isinstance(value, list) else []
    return None
