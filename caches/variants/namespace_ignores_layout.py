"""namespace_ignores_layout: hiradix whose storage namespace names every pool's dtype but not its stored layout.

upstream's HiCacheFile keys name the model and the TP shard, and its own
TODO says the rest: "Include KV dtype and stored layout in keys ...; raw
file payloads do not describe their format". A server started with another
host memory layout stores the same bytes per page in another order, so
nothing but the format's name tells its pages from this one's: a reader
whose namespace leaves the layout out finds them, of the right length and
with valid checksums, and serves another configuration's bytes as its own.
A dtype that changes the width is still a miss here (the page's length
differs), which is why S6 needs the case where only the order differs.

Must be caught by: S6 (conformance/suite/test_foreign_pages.py, the
'layout' case).
"""

from __future__ import annotations

import dataclasses

from caches.config import CacheConfig
from caches.hiradix import HiRadixCache
from caches.storage.namespace import StorageNamespace
from caches.variants._adapter import VariantAdapter, hiradix_variant


class NamespaceIgnoresLayoutCache(HiRadixCache):
    name = "namespace_ignores_layout"

    def namespace_of(self, config: CacheConfig) -> StorageNamespace:
        return dataclasses.replace(super().namespace_of(config), layout=())  # the defect: the stored layout left out


def namespace_ignores_layout() -> VariantAdapter:
    return hiradix_variant("namespace_ignores_layout", NamespaceIgnoresLayoutCache)
