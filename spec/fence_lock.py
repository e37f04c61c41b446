"""The fence's lock discipline, checked where it is kept: inside each fenced section.

F1, F2, F5, F7 and S3 each say that part of an operation's state changes
under the operation's lock. Which thread holds a lock cannot be read from
the outside, and a race through a section of a few bytecodes almost never
shows in a run, so a dropped `with lock:` would pass every scenario. An
implementation that wants its lock discipline judged takes each operation's
lock from its trace recorder (`TraceRecorder.fence_lock()`, a `FenceLock`,
which knows its owner) and, inside every fenced section, states which
section it is in (`TraceRecorder.check_fenced(section, lock)`). The recorder
notes each section entered by a thread that does not hold that lock; the
trace checker `fence_lock` (spec/invariants.py) reports each, under the
clause the section's lock keeps. Production recorders (NullRecorder) hand
out plain locks and check nothing.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

# section -> (the clause its lock keeps, what the lock makes atomic)
FENCED_SECTIONS: dict[str, tuple[str, str]] = {
    "snapshot": ("F2", "the progress snapshot, read atomically with the terminate mark"),
    "terminate": ("F2", "the terminate mark, set atomically with the snapshot"),
    "trim_hit": ("F2", "trimming the expected hit, which the snapshot reads"),
    "set_hit": ("F1", "recording the agreed hit and queueing its IO, refused once terminated"),
    "begin_io": ("F1", "the re-check before a batch starts, atomic with marking its slots in flight"),
    "publish": ("F1", "publishing progress, refused once terminated"),
    "end_io": ("F5", "ending an IO: its slots leave the in-flight set and, when terminated meanwhile, are released"),
    "fail_in_flight": ("F5", "ending every IO in flight as failed"),
    "finish_transfers": ("F5", "saying the IO thread starts nothing more"),
    "revoke": ("F7", "marking a revoked operation terminated and done"),
    "expire_io": ("L4", "counting an IO past its bound as failed"),
    "take_for_insert": ("S1", "handing slots to the tree, refused while IO runs into them"),
    "release": ("S3", "releasing slots, each exactly once"),
    "drain": ("S3", "taking the released slots to free"),
}


@dataclass(frozen=True)
class UnfencedSection:
    """A fenced section entered by a thread that did not hold the operation's lock."""

    section: str
    op: str | None
    thread: str
    position: int  # the trace position when it was entered: events from here on came after

    @property
    def clause(self) -> str:
        return FENCED_SECTIONS[self.section][0]

    def describe(self) -> str:
        what = FENCED_SECTIONS[self.section][1]
        op = f"{self.op}: " if self.op else ""
        return f"{op}{self.section} ran without the operation's lock on thread {self.thread} (its lock keeps {what}), at trace position {self.position}"


class FenceLock:
    """A non-reentrant lock that knows which thread holds it (threading.Lock's contract otherwise)."""

    __slots__ = ("_lock", "_owner")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owner: int | None = None

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        got = self._lock.acquire(blocking, timeout)
        if got:
            self._owner = threading.get_ident()
        return got

    def release(self) -> None:
        self._owner = None
        self._lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def locked(self) -> bool:
        return self._lock.locked()

    def held_by_current_thread(self) -> bool:
        return self._owner == threading.get_ident()

