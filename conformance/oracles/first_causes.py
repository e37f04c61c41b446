"""A trace violation said as the rule whose breaking caused it, with the violation itself beside it.

The spec's checkers judge what the trace shows; some of what they see is the
consequence of another clause broken first. A slot freed while IO into it
is in flight breaks S3, and the free is there because something did not
wait: an operation that freed its own slot under its own load broke F5
(the IO's end frees it), a free that did not wait for a copy between the
tiers broke F9; a slot an operation never freed whose load was still in
flight at its terminate, and ended after, was left by whoever ended that
load (F5). A slot inserted while its operation's own load into it
still runs (S1) was committed past what that pool had loaded: the commit
broke F3. Each such line leads with that cause, so a failure names the
rule a maintainer must fix, and keeps the checker's line beside it.
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping

from spec.trace import LOAD, LOAD_BACK_COPY, WRITE_BACK_COPY, Event, EventKind, Trace
from spec.trace_checks import Violation

_FREED_UNDER_IO = re.compile(r"^freed while IO ([\d,]+) into or out of it is in flight")
_INSERTED_UNDER_IO = re.compile(r"^inserted while IO ([\d,]+) into it is in flight")
_LEAKED = re.compile(r"^never inserted nor freed by (\S+) \(leaked\)")
_UNDER_IO = {"S3": _FREED_UNDER_IO, "S1": _INSERTED_UNDER_IO}  # clause -> its message naming the IO in flight
COPIES = {LOAD_BACK_COPY: "load-back copy", WRITE_BACK_COPY: "write-back copy"}


def said_with_causes(violations: Iterable[Violation], traces: Trace | Iterable[Trace]) -> list[str]:
    """Each violation as a failure line: its cause's clause first where the trace shows one, else the violation alone."""
    by_rank = {t.rank: t for t in ([traces] if isinstance(traces, Trace) else traces)}
    starts: dict[int, Mapping[int, Event]] = {}
    out = []
    for v in violations:
        cause = None
        trace = by_rank.get(v.event.rank) if v.event is not None else None
        under_io = _UNDER_IO[v.clause].match(v.message) if v.clause in _UNDER_IO else None
        leaked = _LEAKED.match(v.message) if v.clause == "S3" else None
        if trace is not None and under_io is not None:
            ios = starts.setdefault(v.event.rank, _io_starts(trace.events))
            cause = _cause(v.event, [ios[int(io)] for io in under_io.group(1).split(",") if int(io) in ios])
        elif trace is not None and leaked is not None and v.slot is not None:
            cause = _leak_cause(trace.events, leaked.group(1), v.event.pool, v.event.space, v.slot)
        out.append(f"{cause}; beside it, {v}" if cause else str(v))
    return out


def _leak_cause(events: Iterable[Event], op: str, pool: str | None, space: str | None, slot: int) -> str | None:
    """F5 when `op`'s load into the slot was in flight at its terminate and ended after it: that IO's end had to free it."""
    stopped = None
    for e in events:
        if e.op != op:
            continue
        if stopped is None and e.kind in (EventKind.TERMINATE, EventKind.REVOKE):
            stopped = e
        elif stopped is not None and e.kind is EventKind.IO_END and e.pool == pool and (e.space or space) == space and slot in e.slots:
            return (f"F5: slot {slot} of pool {pool} was under {op}'s IO {e.io} at its terminate (#{stopped.seq}) and that IO ended "
                    f"after it (#{e.seq}), yet nothing freed the slot: whoever ends such an IO frees its slots")
    return None


def _io_starts(events: Iterable[Event]) -> Mapping[int, Event]:
    return {e.io: e for e in events if e.kind is EventKind.IO_START and e.io is not None}


def _cause(e: Event, open_ios: list[Event]) -> str | None:
    if e.kind is EventKind.INSERT:
        own = next((io for io in open_ios if io.value == LOAD and e.op is not None and io.op == e.op), None)
        if own is None:
            return None
        return (f"F3: {e.op} committed a page of pool {e.pool} whose own load IO {own.io} into it had not ended "
                f"(the commit was not clamped to what every pool had loaded)")
    return _free_cause(e, open_ios)


def _free_cause(free: Event, open_ios: list[Event]) -> str | None:
    copy = next((e for e in open_ios if e.value in COPIES), None)
    if copy is not None:
        return f"F9: a {free.space} slot of pool {free.pool} was freed while the {COPIES[copy.value]} IO {copy.io} through it was pending"
    own = next((e for e in open_ios if e.value == LOAD and free.op is not None and e.op == free.op), None)
    if own is not None:
        return (f"F5: {free.op} freed a slot while its own load IO {own.io} into it was in flight, "
                f"instead of leaving it to whoever ends that IO")
    return None
