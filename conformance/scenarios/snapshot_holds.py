"""A hold point between a progress snapshot and its use: the moment the scheduler lets go of an operation's lock.

An implementation that takes its operations' locks from the trace recorder
and names each fenced section (spec/fence_lock.py) shows where a snapshot
ends: the release of the lock it was read under. This recorder runs a test's
action right there, on the thread that took the snapshot, before that thread
can use what it read. The test moves IO in that gap (a batch ends, the extra
pools finish). A vote or a commit that uses its snapshot cannot tell; one
that reads the operation's fields again, or takes its snapshot in a lock
acquisition of its own before the terminate mark, then acts on progress its
snapshot never held, and the trace shows which IO ended in between.

An implementation whose locks are not the recorder's offers no such point:
`releases()` stays empty for it, and a test skips saying so.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable

from conformance.gates import WatchedTrace
from spec.fence_lock import FenceLock
from spec.trace import Event, EventKind

SNAPSHOT = "snapshot"
TERMINATE = "terminate"


@dataclass(frozen=True)
class SnapshotRelease:
    """An operation's lock let go after a section that read a snapshot, with the sections it covered."""

    op: str | None
    sections: frozenset[str]
    thread: int
    position: int  # the trace position at the release: events from here on came after it

    @property
    def with_terminate(self) -> bool:
        return TERMINATE in self.sections


Action = Callable[[SnapshotRelease], None]


class _ReportingLock(FenceLock):
    """A FenceLock that tells its recorder, once released, which fenced sections its holder entered."""

    __slots__ = ("_recorder", "_sections", "_op")

    def __init__(self, recorder: "SnapshotHoldTrace") -> None:
        super().__init__()
        self._recorder = recorder
        self._sections: set[str] = set()
        self._op: str | None = None

    def entered(self, section: str, op: str | None) -> None:
        self._sections.add(section)
        self._op = op if op is not None else self._op

    def release(self) -> None:
        sections, op = self._sections, self._op
        self._sections = set()
        super().release()
        if SNAPSHOT in sections:
            self._recorder.snapshot_released(op, frozenset(sections))  # outside the lock: the action may wait for IO


class SnapshotHoldTrace(WatchedTrace):
    """A WatchedTrace whose operation locks report each snapshot's release, where armed actions run once each."""

    def __init__(self, clock: Any, *, profile: str | None = None) -> None:
        super().__init__(clock, profile=profile)
        self._armed: list[tuple[Callable[[SnapshotRelease], bool], Action]] = []
        self._releases: list[SnapshotRelease] = []  # guarded by `changed`

    def fence_lock(self) -> FenceLock:
        return _ReportingLock(self)

    def check_fenced(self, section: str, lock: object, op: str | None = None) -> None:
        super().check_fenced(section, lock, op)
        if isinstance(lock, _ReportingLock) and lock.held_by_current_thread():
            lock.entered(section, op)

    def at_release(self, when: Callable[[SnapshotRelease], bool], action: Action) -> None:
        """Run `action` (once) at the first snapshot release matching `when`, in the releasing thread."""
        with self.changed:
            self._armed.append((when, action))

    def snapshot_released(self, op: str | None, sections: frozenset[str]) -> None:
        release = SnapshotRelease(op, sections, threading.get_ident(), self.position())
        with self.changed:
            self._releases.append(release)
            index = next((i for i, (when, _) in enumerate(self._armed) if when(release)), None)
            action = self._armed.pop(index)[1] if index is not None else None
            self.changed.notify_all()
        if action is not None:
            action(release)

    def releases(self, op: str, thread: int | None = None) -> list[SnapshotRelease]:
        with self.changed:
            return [r for r in self._releases if r.op == op and (thread is None or r.thread == thread)]


def moved_between(events: tuple[Event, ...] | list[Event], op: str, first: int, last: int) -> list[Event]:
    """What `op`'s IO did in the trace between positions `first` (included) and `last` (excluded): its ends, hits and its end of IO."""
    kinds = (EventKind.IO_END, EventKind.HIT, EventKind.IO_DONE, EventKind.REVOKE)
    return [e for e in events if first <= e.seq < last and e.op == op and e.kind in kinds]
