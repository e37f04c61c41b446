"""F9 from the trace alone: a slot freed while a copy between the tiers into or out of it was still pending.

The spec's S3 checker sees every free under any IO; this one names the
copies (host->device load-backs, device->host write-backs) and the
direction, so a test of F9 can say which copy the free did not wait for,
with S3 beside it.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Iterator

from spec.trace import LOAD_BACK_COPY, WRITE_BACK_COPY, Event, EventKind

COPIES = {LOAD_BACK_COPY: "load-back copy", WRITE_BACK_COPY: "write-back copy"}


def frees_under_pending_copies(events: Iterable[Event]) -> Iterator[str]:
    """One line per slot freed while a copy touching it (same pool, tier and slot) had started and not ended."""
    pending: dict[tuple[str | None, str | None, int], dict[int, str]] = defaultdict(dict)  # slot -> {io: direction}
    for e in events:
        if e.kind is EventKind.IO_START and e.value in COPIES:
            for slot in e.slots:
                pending[(e.pool, e.space, slot)][e.io] = e.value
        elif e.kind is EventKind.IO_END and e.io is not None:
            for slot in e.slots:
                pending[(e.pool, e.space, slot)].pop(e.io, None)
        elif e.kind is EventKind.FREE:
            for slot in e.slots:
                copies = pending.get((e.pool, e.space, slot))
                if copies:
                    io, direction = next(iter(copies.items()))
                    yield f"{e.space} slot {slot} of pool {e.pool} freed at #{e.seq} while {COPIES[direction]} IO {io} through it was pending"
