"""The built-in hiradix whose sessions take longer to close than a short hang bound.

A cache's close may join threads within their own bounds: upstream's storage
threads catch an error and go on, so a join that waits for one to end runs
out its whole bound. Loaded by factory spec in the rank processes.
"""

from __future__ import annotations

import threading
from typing import Any

from caches.adapters import BuiltinAdapter, CacheSession, hiradix

CLOSE_S = 2.0  # past the 1-second hang bound tests/harness/test_multirank_launch.py gives the launch


class SlowCloseSession(CacheSession):
    def close(self) -> None:
        threading.Event().wait(CLOSE_S)  # a bounded join of a thread that does not end
        super().close()


class SlowCloseAdapter(BuiltinAdapter):
    def create(self, env: Any) -> CacheSession:
        return SlowCloseSession(super().create(env).cache)


def slow_close_hiradix() -> SlowCloseAdapter:
    base = hiradix()
    return SlowCloseAdapter(base.name, base.default_extra_pools, base.capabilities)
