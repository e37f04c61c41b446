"""A rank's heartbeat: its current step, last trace event, collectives entered and background-thread deaths,
written to a file when they change, so that the parent can name where a rank hung."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Callable, Sequence

from conformance.bounds import EXIT_S
from conformance.multirank.records import collective_name
from spec.trace import EventKind, TraceRecorder


BEAT_S = 0.1  # how often a rank notes where it is: a period, not a bound (nothing waits on it)


def write_atomic(path: Path, data: bytes) -> None:
    """The parent reads these files while the rank writes them: it sees the old content or the new, never half."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


class Heartbeat:
    """The rank's current step and last trace event, written to a file when they change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._phase = "starting"
        self._setup = True  # process start: the parent judges it by the startup bound
        self.trace: TraceRecorder | None = None
        # The current cache's background-thread deaths, without waiting (its optional background_errors_now()).
        self.deaths: Callable[[], Sequence[str]] | None = None
        self._last_deaths: list[str] = []
        self._stop = threading.Event()
        self._written = ""
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name=f"heartbeat-{path.stem}", daemon=True)
        self._thread.start()

    def phase(self, text: str, *, setup: bool = False) -> None:
        """setup: a step that builds or tears down rather than runs (joining the group, building a cache: imports,
        pools, threads; closing one: joining its threads, each within its own bound), which a loaded machine or a
        bounded join can stretch past the hang bound; the parent judges it by the startup bound."""
        self._phase = text
        self._setup = setup
        self._write()

    def _write(self, *, deaths: bool = False) -> None:
        trace = self.trace
        events = trace.events() if trace is not None else ()
        beat = {
            "deaths": self._read_deaths() if deaths else self._last_deaths,
            "phase": self._phase,
            "setup": self._setup,
            "last": events[-1].describe() if events else "",
            # What this rank entered, in order: on a hang the parent finds the first divergence.
            "collectives": [collective_name(e) for e in events if e.kind is EventKind.COLLECTIVE],
        }
        text = json.dumps(beat)
        with self._lock:
            if text != self._written:
                self._written = text
                write_atomic(self.path, text.encode())

    def _loop(self) -> None:
        # A rank stuck inside a call records nothing new; this notes where it stopped.
        while not self._stop.wait(BEAT_S):
            self._write(deaths=True)

    def _read_deaths(self) -> list[str]:
        try:
            self._last_deaths = list(self.deaths()) if self.deaths is not None else []
        except Exception:  # a cache that is closing: no verdict from the heartbeat
            pass
        return self._last_deaths

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(EXIT_S)
        self._write()
