"""split_head_unbacked: hiradix whose host backup follows its node as the node is at the acknowledgement.

An insert that shares only part of a node splits it. When that happens
between the start of the node's device-to-host copy and its
acknowledgement, the copy covered the whole node, but a backup that
looks at the node only at the ack sees the tail: the head's pages never
get their host copy, so they never reach storage, and the storage tier
serves a shorter prefix (here none: a prefix from storage starts at the
root) than was written. Upstream's HiRadixCache did so until
write_backup_storage learned to walk the split chain (dff45411d).

Must be caught by: L6 (conformance/suite/test_split_backups.py).
"""

from __future__ import annotations

from caches.core.slots import KV_GROUP
from caches.core.write_path import PENDING_KEY, PendingWrite, WritePath
from caches.hiradix import HiRadixCache
from spec.trace import HOST
from caches.variants._adapter import VariantAdapter, hiradix_variant


class TailOnlyWritePath(WritePath):
    def on_split(self, head, tail) -> None:
        super().on_split(head, tail)
        if head.ext.get(PENDING_KEY) is not None:
            head.ext["split_off"] = True  # the defect: the ack will see only the node it was started for

    def _ack_write(self, pending: PendingWrite) -> None:
        lost = [part for part in pending.parts if part[0].ext.pop("split_off", False)]
        for node, host, windows in lost:
            node.ext.pop(PENDING_KEY, None)
            self.copies.free(HOST, KV_GROUP, host, pools=self.pools.token_pools)
            for pool, slot in windows.items():
                self.copies.free(HOST, pool, slot, pools=[pool])
        pending.parts = [part for part in pending.parts if part not in lost]
        super()._ack_write(pending)


class SplitHeadUnbackedCache(HiRadixCache):
    name = "split_head_unbacked"
    write_path_class = TailOnlyWritePath


def split_head_unbacked() -> VariantAdapter:
    return hiradix_variant("split_head_unbacked", SplitHeadUnbackedCache)
