"""Injected monotonic clocks.

The spec measures prefetch timeouts on a monotonic clock that callers inject,
so tests can place an operation exactly at, before or after its deadline
without sleeping.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Protocol, runtime_checkable

from spec.errors import ConfigError


@runtime_checkable
class Clock(Protocol):
    def now(self) -> float:
        """Seconds on a monotonic scale; only differences are meaningful."""
        ...


class MonotonicClock:
    """The production clock: time.monotonic()."""

    def now(self) -> float:
        return time.monotonic()

    def __repr__(self) -> str:
        return "MonotonicClock()"


class ManualClock:
    """A clock that moves only when told to; safe to read from any thread."""

    def __init__(self, start: float = 0.0) -> None:
        _require_finite("start", start)
        self._now = float(start)
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> float:
        _require_finite("seconds", seconds)
        if seconds < 0:
            raise ConfigError("seconds", seconds, "a finite number >= 0 (a monotonic clock never goes back)")
        with self._lock:
            self._now += float(seconds)
            return self._now

    def set(self, t: float) -> float:
        _require_finite("t", t)
        with self._lock:
            if t < self._now:
                raise ConfigError("t", t, f"a time >= the current time {self._now!r} (a monotonic clock never goes back)")
            self._now = float(t)
            return self._now

    def __repr__(self) -> str:
        return f"ManualClock(now={self.now()!r})"


def _require_finite(field: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(field, value, "a finite number")
