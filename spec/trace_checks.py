"""What every trace checker shares: a Violation, the context a checker reads, slot keys, and when an operation's IO is over.

The checkers themselves: spec/invariants.py (safety, fence, decision and
combine, and `check`, which runs them all) and spec/liveness_checks.py (L1-L4).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Iterator, Mapping

from spec.config import TerminationConfig
from spec.profiles import Profile
from spec.trace import Event, EventKind, Trace


@dataclass(frozen=True)
class Violation:
    clause: str
    message: str
    event: Event | None = None
    slot: int | None = None

    def __str__(self) -> str:
        where = f" at {self.event.describe()}" if self.event is not None else ""
        slot = f" slot {self.slot}" if self.slot is not None else ""
        return f"{self.clause}: {self.message}{slot}{where}"


@dataclass(frozen=True)
class CheckContext:
    traces: Mapping[int, Trace]
    config: TerminationConfig | None
    closed: bool
    profile: Profile  # the architecture the implementation declares: whose vote, combine and timer judge it


Checker = Callable[[CheckContext], Iterator[Violation]]
SlotKey = tuple  # (pool, space, slot)


def slot_keys(event: Event) -> Iterator[tuple[SlotKey, int]]:
    for slot in event.slots:
        yield (event.pool, event.space, slot), slot


def op_ended(kind: EventKind) -> bool:
    return kind in (EventKind.TERMINATE, EventKind.REVOKE)


# An operation starts no more IO once terminated, revoked or done (its IO thread said so):
# a cache that commits a finished prefetch without a terminate (0.5.2x's ACK drain) is not exposing anything.
def io_closed(kind: EventKind) -> bool:
    return op_ended(kind) or kind is EventKind.IO_DONE


def terminates_by_step(ctx: CheckContext) -> dict[tuple[str, int], dict[int, Event]]:
    out: dict[tuple[str, int], dict[int, Event]] = defaultdict(dict)
    for rank, trace in ctx.traces.items():
        for e in trace.events:
            if e.kind is EventKind.TERMINATE and e.step is not None:
                out[(e.op, e.step)][rank] = e
    return out
