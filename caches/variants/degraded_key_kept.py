"""degraded_key_kept: hiradix whose degraded host allocation shrinks the slots but not the page keys.

When the host tier has less room than a prefetch asks for (after host
eviction), upstream takes the room left, page-aligned, and must cut the
page keys it hands the controller to the same length. A build that cut
the request's tokens instead of the keys asked storage for every page of
the request with slots for only some of them: the IO ran off the end of
its slots. The slots here shrink as they should; the keys and the length
the prefetch reports do not.

Must be caught by: S8 (conformance/suite/test_faults.py,
test_full_host_tier_shrinks_or_skips_the_prefetch).
"""

from __future__ import annotations

from caches.core.hashing import page_hashes
from caches.core.prefetch_path import PrefetchPath
from caches.hiradix import HiRadixCache
from caches.variants._adapter import VariantAdapter, hiradix_variant


class KeyKeptPrefetchPath(PrefetchPath):
    def _make(self, request_id, missing, anchor, pages):
        op = super()._make(request_id, missing, anchor, pages)
        ps = self.page_size
        if op is not None and len(op.tokens) < pages * ps:
            op.tokens = list(missing[: pages * ps])  # the defect: the keys keep the pages the slots lost
            op.requested_hashes = page_hashes(op.tokens, ps, prev=anchor.last_hash)
        return op


class DegradedKeyKeptCache(HiRadixCache):
    name = "degraded_key_kept"
    prefetch_path_class = KeyKeptPrefetchPath


def degraded_key_kept() -> VariantAdapter:
    return hiradix_variant("degraded_key_kept", DegradedKeyKeptCache)
