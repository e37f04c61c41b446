"""Deterministic interleavings: hold or fail a thread at a trace event, and wait on what the trace records.

One module for the single-process scenarios and the multi-rank ranks alike. A
gate is installed as the trace recorder's gate: `Gate` parks the thread that
reached a matching event until the test releases it (the scenarios), `IoValve`
parks each storage->host load of a controlled prefetch until the driver allows
it (a rank). Both inject faults through `Faults` (the implementation must treat
one as a failed transfer). `WatchedTrace` wakes its waiters on every event;
`ObservedTrace` adds a per-operation summary for the rank driver. Every wait
is bounded and names what hung.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from conformance.errors import ConformanceError, ConformanceFailure
from conformance.bounds import WAIT_S
from spec.trace import LOAD, Event, EventKind, TraceRecorder

Predicate = Callable[[Event], bool]


class GateTimeout(ConformanceFailure):
    """A bounded wait in a gated scenario ran out."""


class InjectedFault(ConformanceError, OSError):
    """Raised at a gate point to simulate a storage or copy failure."""


class Faults:
    """Predicate-counted fault injection: the next `times` events matching a rule raise InjectedFault.

    The owner calls `raise_if_matches` under its own lock, so counting and raising are one step.
    """

    def __init__(self, where: str = "") -> None:
        self.where = where  # prefixed to each fault's message ("rank 1: ")
        self._rules: list[list[Any]] = []  # [description, predicate, remaining, times]

    def add(self, description: str, predicate: Predicate, times: int = 1) -> None:
        self._rules.append([description, predicate, times, times])

    def unfired(self) -> list[str]:
        """The rules no event ever matched: a scenario built on one judged a fault that never happened."""
        return [rule[0] for rule in self._rules if rule[2] == rule[3]]

    def raise_if_matches(self, event: Event) -> None:
        for rule in self._rules:
            if rule[2] and rule[1](event):
                rule[2] -= 1
                raise InjectedFault(f"{self.where}injected fault '{rule[0]}' at {event.describe()}")


@dataclass
class Hold:
    description: str
    predicate: Predicate
    times: int
    timeout_s: float
    reached: list[Event] = field(default_factory=list)
    claimed: int = 0  # threads matched so far (claimed under the gate's lock)
    _arrived: threading.Condition = field(default_factory=threading.Condition)
    _released: threading.Event = field(default_factory=threading.Event)

    def wait_reached(self, count: int = 1) -> Event:
        """Block until `count` threads are parked here; returns the latest event."""
        __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
        with self._arrived:
            ok = self._arrived.wait_for(lambda: len(self.reached) >= count, self.timeout_s)
        if not ok:
            raise GateTimeout(f"no thread reached hold '{self.description}' within {self.timeout_s}s ({len(self.reached)}/{count} arrived)")
        return self.reached[count - 1]

    def reached_stepping(self, step: Callable[[], Any], *, rounds: int = 50) -> Event:
        """Take scheduler steps until a thread is parked here: for IO that a step hands to a background thread (a
        storage backup begun at a write-through ack). Each step is followed by a bounded wait for the thread."""
        __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
        for _ in range(rounds):
            step()
            with self._arrived:
                if self._arrived.wait_for(lambda: bool(self.reached), self.timeout_s / rounds):
                    return self.reached[0]
        raise GateTimeout(f"no thread reached hold '{self.description}' within {rounds} scheduler steps ({self.timeout_s}s)")

    def release(self) -> None:
        self._released.set()

    def _park(self, event: Event) -> None:
        with self._arrived:
            self.reached.append(event)
            self._arrived.notify_all()
        if not self._released.wait(self.timeout_s):
            raise GateTimeout(f"hold '{self.description}' was never released within {self.timeout_s}s (thread parked at {event.describe()})")


class Gate:
    def __init__(self, trace: TraceRecorder, *, timeout_s: float = WAIT_S) -> None:
        self.trace = trace
        self.timeout_s = timeout_s
        self._holds: list[Hold] = []
        self._faults = Faults()
        self._lock = threading.Lock()
        trace.set_gate(self)

    def hold(self, description: str, predicate: Predicate, *, times: int = 1) -> Hold:
        """Park the next `times` threads whose gated event matches."""
        hold = Hold(description, predicate, times, self.timeout_s)
        with self._lock:
            self._holds.append(hold)
        return hold

    def fail(self, description: str, predicate: Predicate, *, times: int = 1) -> None:
        with self._lock:
            self._faults.add(description, predicate, times)

    def release_all(self) -> None:
        with self._lock:
            holds = list(self._holds)
        for hold in holds:
            hold.release()

    def __call__(self, event: Event) -> None:
        with self._lock:
            self._faults.raise_if_matches(event)
            hold = next((h for h in self._holds if h.claimed < h.times and h.predicate(event)), None)
            if hold is not None:
                hold.claimed += 1
        if hold is not None:
            hold._park(event)

    def close(self) -> None:
        self.release_all()
        self.trace.set_gate(None)


class WatchedTrace(TraceRecorder):
    """A TraceRecorder whose waiters wake on every event (and on every gate arrival).

    wait_until() is the bounded, sleep-free way to wait for something a
    background thread records (an IO_DONE, an IO_END). A rank's valve waits on
    the same `changed` condition, so a load's arrival wakes the driver's waits.
    """

    def __init__(self, clock: Any, *, rank: int = 0, profile: str | None = None) -> None:
        super().__init__(clock, rank=rank, profile=profile)
        self.changed = threading.Condition()
        self._seen: set[tuple[EventKind, str | None]] = set()  # (kind, op) and (kind, None) recorded so far

    def record(self, kind: EventKind, **fields: Any) -> Event:
        event = super().record(kind, **fields)
        with self.changed:
            # Indexed as recorded: waiters re-test on every event, and scanning the
            # whole trace each time made long runs quadratic.
            self._seen.update(((event.kind, event.op), (event.kind, None)))
            after = self.observe(event)
            self.changed.notify_all()
        if after is not None:
            after(event)  # outside every lock: it may wait for other threads
        return event

    def observe(self, event: Event) -> Callable[[Event], None] | None:
        """A subclass's bookkeeping of one event, under `changed`; it may return a callback to run after the lock."""
        return None

    def notify(self) -> None:
        with self.changed:
            self.changed.notify_all()

    def wait_until(self, predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
        __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
        with self.changed:
            if not self.changed.wait_for(predicate, timeout_s):
                raise GateTimeout(f"{what} did not happen within {timeout_s}s")

    def has(self, kind: EventKind, op: str | None = None) -> bool:
        return (kind, op) in self._seen

    def wait_for_event(self, kind: EventKind, op: str | None, timeout_s: float) -> None:
        # An operation whose IO never ends breaks L4 (every transfer ends within a bound).
        __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
        what = f"L4: {kind.value} of {op}" if kind is EventKind.IO_DONE else f"{kind.value} of {op}"
        self.wait_until(lambda: self.has(kind, op), timeout_s, what)


class ObservedGate(Gate):
    """A Gate that counts the threads arriving at events matching `watch`, as they arrive.

    Arrival is noted as the thread enters the gate: it has recorded everything
    it does before this point, and does nothing more until released.
    """

    def __init__(self, trace: WatchedTrace, watch: Callable[[Event], bool], *, timeout_s: float = WAIT_S) -> None:
        super().__init__(trace, timeout_s=timeout_s)
        self.watched_trace = trace
        self.watch = watch
        self.arrivals: list[Event] = []  # guarded by trace.changed

    def __call__(self, event: Event) -> None:
        if self.watch(event):
            with self.watched_trace.changed:
                self.arrivals.append(event)
                self.watched_trace.changed.notify_all()
        super().__call__(event)

    def arrived(self) -> int:
        with self.watched_trace.changed:
            return len(self.arrivals)


def prefetch_load_of(request_id: str) -> Callable[[Event], bool]:
    """Gate points of a prefetch: its storage-to-host IO starts (each KV batch, each extra pool)."""
    return lambda e: e.kind is EventKind.IO_START and e.op == request_id and e.value == LOAD


class ObservedTrace(WatchedTrace):
    """A WatchedTrace that keeps a per-operation summary, for a rank's scenario driver.

    Waiters use the summary, never the operation's lock, so waiting cannot
    deadlock with the implementation's threads.
    """

    def __init__(self, clock: Any, *, rank: int, profile: str | None = None) -> None:
        super().__init__(clock, rank=rank, profile=profile)
        self.views: dict[str, OpView] = {}
        self._hooks: list[tuple[Predicate, Callable[[Event], None]]] = []
        self.on_terminate: Callable[[Event], None] | None = None  # a scheduler check's terminates, as they happen

    def record(self, kind: EventKind, **fields: Any) -> Event:
        event = super().record(kind, **fields)
        on_terminate = self.on_terminate
        if on_terminate is not None and event.kind is EventKind.TERMINATE and event.step is not None:
            on_terminate(event)
        return event

    def observe(self, event: Event) -> Callable[[Event], None] | None:
        if event.op is not None:
            self.views.setdefault(event.op, OpView()).update(event)
        for index, (predicate, _) in enumerate(self._hooks):
            if predicate(event):
                return self._hooks.pop(index)[1]
        return None

    def view(self, op: str) -> "OpView":
        return self.views.setdefault(op, OpView())

    def once(self, predicate: Predicate, callback: Callable[[Event], None]) -> None:
        """Run callback (once, in the recording thread) right after the first event matching predicate."""
        with self.changed:
            self._hooks.append((predicate, callback))


@dataclass
class OpView:
    """What the trace says of one operation so far."""

    hit_pages: int = 0
    hit_done: bool = False
    kv_slots_ok: int = 0
    io_done: bool = False
    terminated: bool = False

    def update(self, e: Event) -> None:
        if e.kind is EventKind.HIT:
            self.hit_pages = int(e.value)
            self.hit_done = True
        elif e.kind is EventKind.REVOKE:
            self.hit_done = self.terminated = True
        elif e.kind is EventKind.TERMINATE:
            self.terminated = True
        elif e.kind is EventKind.IO_DONE:
            self.io_done = self.hit_done = True
        elif e.kind is EventKind.IO_END and e.pool == "kv" and e.value:
            self.kv_slots_ok += len(e.slots)


class IoValve:
    """A rank's trace gate: parks each storage->host load of controlled prefetches until allowed.

    Loads are counted per operation; the n-th one passes once `allow` was
    called n times. Faults raise InjectedFault at the gate point (a failed
    transfer for the implementation). It waits on its trace's condition, so a
    load's arrival wakes the driver's waits. Every wait is bounded.
    """

    def __init__(self, trace: WatchedTrace, rank: int, timeout_s: float) -> None:
        self._cond = trace.changed
        self.rank = rank
        self.timeout_s = timeout_s
        self._arrived: dict[str, int] = {}
        self._allowed: dict[str, int] = {}
        self._faults = Faults(f"rank {rank}: ")
        self._open = False
        trace.set_gate(self)

    def control(self, op: str) -> None:
        with self._cond:
            self._arrived.setdefault(op, 0)
            self._allowed.setdefault(op, 0)

    def allow(self, op: str, count: int = 1) -> None:
        with self._cond:
            self._allowed[op] += count
            self._cond.notify_all()

    def parked(self, op: str) -> bool:
        """A load of op has reached the gate beyond what was allowed: its IO is started and held."""
        return self._arrived.get(op, 0) > self._allowed.get(op, 0)

    def any_parked(self) -> bool:
        return any(self.parked(op) for op in self._arrived)

    def fail(self, description: str, predicate: Predicate, *, times: int = 1) -> None:
        with self._cond:
            self._faults.add(description, predicate, times)

    def unfired(self) -> list[str]:
        with self._cond:
            return self._faults.unfired()

    def release(self, op: str) -> None:
        """Every later load of op passes."""
        self.allow(op, 1 << 30)

    def controlled(self) -> list[str]:
        with self._cond:
            return list(self._arrived)

    def open_all(self) -> None:
        with self._cond:
            self._open = True
            self._cond.notify_all()

    def __call__(self, event: Event) -> None:
        with self._cond:
            self._faults.raise_if_matches(event)
            op = event.op
            if self._open or event.kind is not EventKind.IO_START or event.value != LOAD or op not in self._arrived:
                return
            index = self._arrived[op]
            self._arrived[op] += 1
            self._cond.notify_all()
            if not self._cond.wait_for(lambda: self._open or self._allowed[op] > index, self.timeout_s):
                raise GateTimeout(f"rank {self.rank}: load {index + 1} of {op} was never released within {self.timeout_s}s ({event.describe()})")
