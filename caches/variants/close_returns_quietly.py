"""close_returns_quietly: hiradix whose close() logs a thread that did not stop and returns as if it had.

A shutdown path that must not raise is a common wish; this variant grants
it by swallowing the timeout. A storage read held past the close's bound
then still runs when close() returns: the caller believes every thread and
slot is back, and the read later writes into slots and returns them after
the owner moved on.

Must be caught by: F5 (conformance/suite/test_close.py), with F8 beside it.
"""

from __future__ import annotations

import logging

from caches.errors import CacheTimeoutError
from caches.hiradix import HiRadixCache
from caches.variants._adapter import VariantAdapter, hiradix_variant

log = logging.getLogger(__name__)


class CloseReturnsQuietlyCache(HiRadixCache):
    name = "close_returns_quietly"

    def close(self) -> None:
        try:
            super().close()
        except CacheTimeoutError as exc:  # the defect: a thread still running is only logged
            log.warning("close: %s", exc)


def close_returns_quietly() -> VariantAdapter:
    return hiradix_variant("close_returns_quietly", CloseReturnsQuietlyCache)
