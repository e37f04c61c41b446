"""A bound on each conformance test as a whole, so a run that hangs ends naming the test and what each thread was doing.

The suite's own waits are bounded one by one (conformance/bounds.py), but a live
session runs code nobody here wrote, and a wait inside it can lack a bound: torch's
JIT build of a tree's C++ helper polls a lock file forever when a build killed
elsewhere left that file. Past TEST_S the watchdog writes one line naming the test
and the bound, then every thread's stack, and ends the process: under xdist the
controller reports that worker crashed while running the test and carries on with
a fresh worker; a run without xdist ends there.
"""

from __future__ import annotations

import faulthandler
import os
import sys
import threading
from typing import IO, Any

import pytest

from conformance.bounds import SCALE_ENV, TEST_S

WATCHDOG_NAME = "conformance-test-watchdog"
EXIT_STATUS = 70  # EX_SOFTWARE: the process ended itself, not a test's verdict


class Watchdog:
    def __init__(self, seconds: float = TEST_S, stream: IO[str] | None = None) -> None:
        self.seconds = seconds
        # The stderr the session started with (capture is suspended while plugins configure): a test's own capture
        # would swallow the stacks otherwise.
        self.stream = stream if stream is not None else os.fdopen(os.dup(sys.__stderr__.fileno()), "w")

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: Any):
        if "impl" not in getattr(item, "fixturenames", ()):  # a conformance test: it drives an implementation
            return (yield)
        timer = threading.Timer(self.seconds, self.expire, args=(item.nodeid,))
        timer.daemon = True
        timer.start()
        try:
            return (yield)
        finally:
            timer.cancel()

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.stream.close()  # the duplicated descriptor: a session run in-process must not leak one per run

    def expire(self, nodeid: str) -> None:
        self.stream.write(f"hicache-conformance: {nodeid} did not finish within {self.seconds:g} s (the bound on one "
                          f"conformance test; {SCALE_ENV} scales it): every thread's stack follows, then this process ends\n")
        self.stream.flush()
        faulthandler.dump_traceback(self.stream, all_threads=True)
        self.stream.flush()
        os._exit(EXIT_STATUS)
