"""The storage-thread seam: upstream's background threads of one cache, whether they live, and what ended one (L5)."""

from __future__ import annotations

import threading
from typing import Any, Sequence

from conformance.bounds import bound
from conformance.gates import GateTimeout
from conformance.live.taps import Taps

IO_THREAD = "prefetch_io_aux_thread"
FORK_THREADS = ("prefetch_thread", "backup_thread", IO_THREAD)  # by attribute of the controller
THREAD_EXIT_S = bound(5.0)  # how long a storage thread may take to end after an exception left its step


class StorageThreads:
    def __init__(self, controller: Any, names: Sequence[str], taps: Taps, wait_timeout_s: float) -> None:
        self.controller = controller
        self.names = tuple(names)
        self.taps = taps
        self.wait_timeout_s = wait_timeout_s

    def threads(self) -> list[threading.Thread]:
        return [t for t in (getattr(self.controller, n, None) for n in self.names) if t is not None]

    def thread(self, name: str) -> threading.Thread | None:
        """The controller's thread of that attribute; the IO thread where the controller keeps it in a local of its
        prefetch thread (2025): the thread the taps saw take an operation."""
        thread = getattr(self.controller, name, None)
        return self.taps.io_thread if thread is None and name == IO_THREAD else thread

    def alive(self, name: str) -> bool:
        thread = self.thread(name)
        return thread is not None and thread.is_alive()

    def state(self) -> str:
        """Which threads are alive, and what ended the IO thread: for a message naming what hung."""
        alive = ", ".join(f"{name} alive: {self.alive(name)}" for name in self.names)
        return f"{alive}; IO thread errors: {'; '.join(self.taps.io_thread_errors) or 'none'}"

    def deaths(self, wait_s: float | None = None) -> list[str]:
        """L5: each thread that an exception ended while the cache was open (one line each).

        wait_s: how long a thread an exception is leaving may take to end (default: THREAD_EXIT_S, within the wait bound).

        A thread whose loop catches the error and goes on is fine; one whose
        loop catches only queue.Empty dies, and every later transfer of this
        cache stalls behind it.
        """
        by_ident = {t.ident: name for name in self.names if (t := self.thread(name)) is not None}
        out = []
        for ident, error in list(self.taps.thread_errors):
            if error.startswith(f"{GateTimeout.__name__}: "):
                continue  # the harness's own hold ran out under the thread (the test had stopped driving it): not upstream's
            name = by_ident.get(ident)
            thread = self.thread(name) if name else None
            if thread is None:
                continue
            # The exception is on its way out of the thread's loop: bounded, and at once when the thread ends
            # (a loop that catches it keeps the thread alive, and it is no death).
            thread.join(min(THREAD_EXIT_S, self.wait_timeout_s) if wait_s is None else wait_s)
            if not thread.is_alive():
                out.append(f"L5: upstream's {name} ended on {error}; its loop catches only queue.Empty, so no later transfer of this cache runs")
        return list(dict.fromkeys(out))
