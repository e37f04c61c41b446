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


def device_kv_allocated(cache) -> int | None:
    """Device slots of the KV group allocated now, None where the implementation reports no such group."""
    found = cache.slot_accounting().get("device:kv")
    return None if found is None else found[0]


def frees_left_for_later(cache) -> str | None:
    """Called right after a flush() that ended every copy: a second flush with nothing between must free nothing.

    A free that waited for a copy runs when that copy ends, by whoever ends
    it (F5, F9); one that the next call runs instead holds its slots for as
    long as no call comes, and a close() with nothing after it leaks them.
    """
    before = cache.slot_accounting()
    cache.flush()
    after = cache.slot_accounting()
    freed = [f"{name}: {before[name][0] - after[name][0]}" for name in sorted(before) if name in after and after[name][0] < before[name][0]]
    if not freed:
        return None
    return (f"F9: slots freed only by the next flush(), though the one before it had ended every copy ({', '.join(freed)}): "
            f"a free that waited for a copy did not run when the copy ended")
