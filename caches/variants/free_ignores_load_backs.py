"""free_ignores_load_backs: hiradix whose frees wait only for copies to the host, not for load-backs to the device.

The copy tracker marks a slot busy for a write-back (device to host), so a
de-duplicated or evicted slot whose backup is still copying is freed only
once the copy ends; a load-back (host to device) marks nothing. A load-back
whose KV copy fails takes its path off the device again while the copies
queued after it (the indexer's, on the same slot numbers) still write into
it, and those slots are freed at once: the next allocation hands out slots
a copy is still writing.

Must be caught by: F9 (conformance/suite/test_load_back_copies.py), with S3
beside it.
"""

from __future__ import annotations

from typing import Any

from caches.core.copies import CopyRecord, CopyTracker
from caches.hiradix import HiRadixCache
from caches.variants._adapter import VariantAdapter, hiradix_variant
from spec.trace import LOAD_BACK_COPY


class LoadBackBlindTracker(CopyTracker):
    def copy(self, **kwargs: Any) -> CopyRecord:
        record = super().copy(**kwargs)
        if kwargs["direction"] == LOAD_BACK_COPY:  # the defect: a load-back keeps no slot busy
            for space, units in record.units.items():
                for unit in units:
                    key = (space, record.group, unit)
                    self._busy[key] -= 1
                    if not self._busy[key]:
                        del self._busy[key]
            record.units = {}
        return record


class FreeIgnoresLoadBacksCache(HiRadixCache):
    name = "free_ignores_load_backs"
    copies_class = LoadBackBlindTracker


def free_ignores_load_backs() -> VariantAdapter:
    return hiradix_variant("free_ignores_load_backs", FreeIgnoresLoadBacksCache)
