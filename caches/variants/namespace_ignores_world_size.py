"""namespace_ignores_world_size: hiradix whose storage namespace leaves the tensor-parallel world size out.

The rank still names each shard's folder, and the layout still names a
shard's shape. A model with 2 KV heads holds one head per rank at world
size 2 and at 4 (at 4 ranks 0 and 1 both hold head 0; at 2 rank 1 holds
head 1): the same page length, other bytes. A deployment at one size then
finds another's pages, of the right length and with valid checksums, and
serves another head as its own.

Must be caught by: S6 (conformance/suite/test_multirank.py,
test_pages_of_another_world_size_are_misses).
"""

from __future__ import annotations

import dataclasses

from caches.config import CacheConfig
from caches.hiradix import HiRadixCache
from caches.storage.namespace import StorageNamespace
from caches.variants._adapter import VariantAdapter, hiradix_variant


class NamespaceIgnoresWorldSizeCache(HiRadixCache):
    name = "namespace_ignores_world_size"

    def namespace_of(self, config: CacheConfig) -> StorageNamespace:
        return dataclasses.replace(super().namespace_of(config), world_size=1)  # the defect: every size reads as one


def namespace_ignores_world_size() -> VariantAdapter:
    return hiradix_variant("namespace_ignores_world_size", NamespaceIgnoresWorldSizeCache)
