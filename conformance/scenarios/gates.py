"""Deterministic interleavings: hold or fail a thread at a trace event.

A Gate is installed as the trace recorder's gate. Rules match events; a hold
rule parks the thread that reached the event until the test releases it; a
fail rule raises there (the implementation must treat it as a failed
transfer). Every wait is bounded and names what hung.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from conformance.bounds import WAIT_S
from spec.trace import LOAD, Event, EventKind, TraceRecorder

Predicate = Callable[[Event], bool]


class GateTimeout(AssertionError):
    """A bounded wait in a gated scenario ran out."""


class InjectedFault(OSError):
    """Raised at a gate point to simulate a storage or copy failure."""


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
        self._faults: list[tuple[str, Predicate, int]] = []
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
            self._faults.append((description, predicate, times))

    def release_all(self) -> None:
        with self._lock:
            holds = list(self._holds)
        for hold in holds:
            hold.release()

    def __call__(self, event: Event) -> None:
        with self._lock:
            for index, (description, predicate, times) in enumerate(self._faults):
                if times and predicate(event):
                    self._faults[index] = (description, predicate, times - 1)
                    raise InjectedFault(f"injected fault '{description}' at {event.describe()}")
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
    background thread records (an IO_DONE, an IO_END).
    """

    def __init__(self, clock: Any, *, rank: int = 0, profile: str | None = None) -> None:
        super().__init__(clock, rank=rank, profile=profile)
        self.changed = threading.Condition()
        self._seen: set[tuple[EventKind, str | None]] = set()  # (kind, op) and (kind, None) recorded so far

    def record(self, kind: EventKind, **fields: Any) -> Event:
        event = super().record(kind, **fields)
        # Indexed as recorded: waiters re-test on every event, and scanning the
        # whole trace each time made long runs quadratic.
        self._seen.update(((event.kind, event.op), (event.kind, None)))
        self.notify()
        return event

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
