"""The event trace an implementation records and the invariants are checked on.

Contract for implementations (what each event must carry) is in EVENT_FIELDS
and in the generated spec doc. Events are recorded in the order they happen;
`seq` orders them within one rank. Cross-rank checks align ranks by the
operation id (the request id, unique per prefetch) and the scheduler step.

Recording and gating are separate on purpose: an implementation records an
event while it holds the lock that makes the event true (so the order in the
trace is the real order), then calls `gate(event)` after releasing it, which
lets a test hold that thread at that point without deadlocking the others.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable

from spec.clock import Clock, MonotonicClock
from spec.decision import DecisionState
from spec.errors import ConfigError
from spec.fence_lock import FENCED_SECTIONS, FenceLock, UnfencedSection
from spec.profiles import profile as find_profile


class EventKind(str, Enum):
    OP_START = "op_start"
    ALLOC = "alloc"
    HIT = "hit"
    REVOKE = "revoke"
    IO_START = "io_start"
    IO_REFUSED = "io_refused"
    IO_LANDED = "io_landed"
    IO_END = "io_end"
    IO_EXPIRED = "io_expired"
    IO_DONE = "io_done"
    STEP = "step"
    VOTE = "vote"
    COLLECTIVE = "collective"
    TERMINATE = "terminate"
    COMMIT = "commit"
    INSERT = "insert"
    FREE = "free"
    LOAD_BACK = "load_back"
    PAGE_WRITE = "page_write"

    def __str__(self) -> str:
        return self.value


HOST = "host"
DEVICE = "device"
SPACES = (HOST, DEVICE)

# IO directions (Event.value of IO_START).
LOAD = "storage_to_host"
BACKUP = "host_to_storage"
LOAD_BACK_COPY = "host_to_device"
WRITE_BACK_COPY = "device_to_host"
IO_DIRECTIONS = (LOAD, BACKUP, LOAD_BACK_COPY, WRITE_BACK_COPY)

# What each kind must carry besides seq, kind, rank and t.
EVENT_FIELDS: dict[EventKind, tuple[str, str]] = {
    EventKind.OP_START: ("op, value={'policy', 'requested_pages', 'page_size'?, 'io_timeout_s'?, 'window_pools'?, 'state_pools'?}", "a prefetch operation was created (start time = t; io_timeout_s: the bound on each of its transfers, L4; window_pools: its TRAILING_WINDOW pools, F10; page_size and state_pools, the pools of one slot per state: how many slots a page key of each pool fills, S5)"),
    EventKind.ALLOC: ("op, pool, space, slots", "slots were allocated for the operation"),
    EventKind.HIT: ("op, value=pages", "the hit length the operation now expects (after the cross-rank MIN or a trim)"),
    EventKind.REVOKE: ("op, value=reason", "the operation was revoked: hit too short, nothing loaded, or the request aborted"),
    EventKind.IO_START: ("op?, pool, space, slots, io, value=direction, keys?", "a copy into or out of these slots began (keys: the page keys a load reads, in slot order; with the OP_START's page_size, S5 checks that each fills exactly its page's slots)"),
    EventKind.IO_REFUSED: ("op, pool, space, slots, io, value=direction, keys?", "optional: an IO the operation's IO thread meant to start was refused by its re-check (the operation was terminated or revoked, F1, or one of its transfers expired, L4); no byte of it may move, S2"),
    EventKind.IO_LANDED: ("op, pool, space, slots, io", "optional: that copy's storage call returned (its bytes are in its slots); its IO_END, and the progress it publishes, come next. Gated after recording, so a harness can hold the IO at its end"),
    EventKind.IO_END: ("op?, pool, space, slots, io, value=ok", "that copy ended (ok False: failed or missed)"),
    EventKind.IO_EXPIRED: ("op, pool, space, slots, io, value=io_timeout_s", "that copy ran past its bound: it counts as failed, its slots stay excluded until its IO_END (L4)"),
    EventKind.IO_DONE: ("op", "the IO thread will start no more IO for the operation"),
    EventKind.STEP: ("step", "a scheduler check began"),
    EventKind.VOTE: ("op, step, value=vote, state, seen?", "this rank's vote and the state it saw (seen: the trace position of that snapshot)"),
    EventKind.COLLECTIVE: ("step?, op?, value=name, group?", "this rank entered a collective (group: '<kind>:<ranks>' when it runs on one of several groups, spec/groups.py)"),
    EventKind.TERMINATE: ("op, step, value=completed_tokens", "the operation was marked terminated and its progress snapshot taken (optionally gated after the lock is released, so a harness can hold the scheduler between the terminate and the commit)"),
    EventKind.COMMIT: ("op, step?, value=tokens, pool?, slots?, keys?", "the agreed length inserted (0 when nothing); optionally what the commit hands the tree: the pool's slots and the page keys they hold, in order (S5 checks that the keys fill exactly those slots)"),
    EventKind.INSERT: ("op, pool, space, slots", "these slots entered the tree"),
    EventKind.FREE: ("op?, pool, space, slots", "these slots returned to their allocator"),
    EventKind.LOAD_BACK: ("pool, slots, keys, digests", "host slots copied to the device; digests of the bytes per page key"),
    EventKind.PAGE_WRITE: ("pool, keys, digests", "bytes stored under these page keys"),
}


@dataclass(frozen=True)
class Event:
    seq: int
    kind: EventKind
    rank: int
    t: float
    op: str | None = None
    step: int | None = None
    pool: str | None = None
    space: str | None = None
    slots: tuple[int, ...] = ()
    io: int | None = None
    value: Any = None
    state: DecisionState | None = None
    keys: tuple[str, ...] = ()
    digests: tuple[str, ...] = ()
    # VOTE: the trace position (a seq) at which the state was observed; events
    # from `seen` on happened after the observation even if recorded before the vote.
    seen: int | None = None
    # COLLECTIVE: the process group it ran on ('<kind>:<ranks>', spec/groups.py); None: the one group.
    group: str | None = None

    def describe(self) -> str:
        parts = [f"#{self.seq} {self.kind.value}", f"rank {self.rank}"]
        for name in ("op", "step", "pool", "space", "io", "group"):
            v = getattr(self, name)
            if v is not None:
                parts.append(f"{name} {v}")
        if self.slots:
            shown = ",".join(str(s) for s in self.slots[:8]) + ("..." if len(self.slots) > 8 else "")
            parts.append(f"slots [{shown}]")
        if self.value is not None:
            parts.append(f"value {self.value!r}")
        return " ".join(parts)


@dataclass(frozen=True)
class Trace:
    """One rank's events, in order."""

    rank: int
    events: tuple[Event, ...] = field(default_factory=tuple)
    # The architecture profile the implementation declares (spec/profiles.py): whose vote and timer judge this trace.
    profile: str | None = None
    # Fenced sections entered without the operation's lock (spec/fence_lock.py); empty where none were checked.
    unfenced: tuple[UnfencedSection, ...] = ()


def page_digest(data: bytes | memoryview) -> str:
    """The digest recorded for one page's bytes (LOAD_BACK, PAGE_WRITE)."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


Gate = Callable[[Event], None]


class TraceRecorder:
    """Thread-safe, append-only event log for one rank, stamped by an injected clock."""

    enabled = True  # False: callers may skip work done only to fill events (digests)

    def __init__(self, clock: Clock | None = None, *, rank: int = 0, profile: str | None = None) -> None:
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
            raise ConfigError("rank", rank, "an integer >= 0")
        self.clock: Clock = clock if clock is not None else MonotonicClock()
        self.rank = rank
        self.profile = None if profile is None else find_profile(profile).id
        self._events: list[Event] = []
        self._lock = threading.Lock()
        self._gate: Gate | None = None
        self._next_io = 0
        self._unfenced: list[UnfencedSection] = []

    def record(self, kind: EventKind, **fields: Any) -> Event:
        kind = EventKind(kind)
        if "slots" in fields:
            fields["slots"] = _as_slot_tuple(fields["slots"])
        for name in ("keys", "digests"):
            if name in fields:
                fields[name] = tuple(fields[name])
        space = fields.get("space")
        if space is not None and space not in SPACES:
            raise ConfigError("space", space, " or ".join(SPACES))
        with self._lock:
            event = Event(seq=len(self._events), kind=kind, rank=self.rank, t=self.clock.now(), **fields)
            self._events.append(event)
        return event

    def position(self) -> int:
        """The seq the next event will get: read while holding the lock that guards a snapshot."""
        with self._lock:
            return len(self._events)

    def next_io_id(self) -> int:
        with self._lock:
            self._next_io += 1
            return self._next_io

    def fence_lock(self) -> FenceLock | threading.Lock:
        """The lock an operation's fenced state lives behind: one that knows its owner, so check_fenced can judge it."""
        return FenceLock()

    def check_fenced(self, section: str, lock: object, op: str | None = None) -> None:
        """Call inside a fenced section (spec/fence_lock.py): notes it when this thread does not hold `lock`."""
        if section not in FENCED_SECTIONS:
            raise ConfigError("section", section, ", ".join(FENCED_SECTIONS))
        if isinstance(lock, FenceLock) and lock.held_by_current_thread():
            return
        with self._lock:
            self._unfenced.append(UnfencedSection(section, op, threading.current_thread().name, len(self._events)))

    def unfenced(self) -> tuple[UnfencedSection, ...]:
        with self._lock:
            return tuple(self._unfenced)

    def set_gate(self, gate: Gate | None) -> None:
        """Install a callable run at each gate point (tests use it to hold a thread)."""
        self._gate = gate

    def gate(self, event: Event) -> None:
        """Call after releasing any lock: the gate may block this thread or raise a fault."""
        gate = self._gate
        if gate is not None:
            gate(event)

    def events(self) -> tuple[Event, ...]:
        with self._lock:
            return tuple(self._events)

    def trace(self) -> Trace:
        return Trace(rank=self.rank, events=self.events(), profile=self.profile, unfenced=self.unfenced())


class NullRecorder(TraceRecorder):
    """Records nothing: for benchmarks and production, where tracing costs too much."""

    enabled = False

    def record(self, kind: EventKind, **fields: Any) -> Event:  # noqa: D401 - same contract
        return _NULL_EVENT

    def gate(self, event: Event) -> None:
        return None

    def fence_lock(self) -> threading.Lock:
        return threading.Lock()

    def check_fenced(self, section: str, lock: object, op: str | None = None) -> None:
        return None


_NULL_EVENT = Event(seq=-1, kind=EventKind.STEP, rank=0, t=0.0)


def _as_slot_tuple(slots: Any) -> tuple[int, ...]:
    if hasattr(slots, "tolist"):
        slots = slots.tolist()  # ints already: a tensor's or an array's elements
        return (slots,) if isinstance(slots, int) else tuple(slots)
    if isinstance(slots, int):
        return (slots,)
    return tuple(map(int, slots))
