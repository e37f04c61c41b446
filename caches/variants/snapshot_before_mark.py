"""snapshot_before_mark: hiradix whose terminate reads its snapshot in a lock acquisition of its own, then marks.

Each step is under the operation's lock, so the lock discipline sees
nothing wrong; but between the two acquisitions the IO thread may end a
batch or the extra pools' transfer, which is published (the operation is
not terminated yet) and which the commit, working from the earlier
snapshot, never inserts: loaded pages dropped, and a commit that is not the
progress at its own terminate. Upstream's terminate_prefetch has the same
two steps the other way round (mark, then read outside the lock).

Must be caught by: F2 (conformance/suite/test_snapshot_holds.py: IO held
at the end of that snapshot), with F11 beside it.
"""

from __future__ import annotations

from caches.core.operation import PrefetchOperation, Progress
from caches.hiradix import HiRadixCache
from caches.variants._adapter import VariantAdapter, hiradix_variant
from spec.trace import EventKind


class SnapshotBeforeMarkOperation(PrefetchOperation):
    def terminate(self, step: int | None) -> Progress:
        snapshot = self.progress()  # the defect: its own acquisition, before the mark
        with self.lock:
            self._fenced("terminate")
            self._terminated = True
            event = self.trace.record(EventKind.TERMINATE, op=self.request_id, step=step, value=snapshot.completed_tokens)
        self.trace.gate(event)
        return snapshot


class SnapshotBeforeMarkCache(HiRadixCache):
    name = "snapshot_before_mark"
    operation_class = SnapshotBeforeMarkOperation


def snapshot_before_mark() -> VariantAdapter:
    return hiradix_variant("snapshot_before_mark", SnapshotBeforeMarkCache)
