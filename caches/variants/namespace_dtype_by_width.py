"""namespace_dtype_by_width: hiradix whose storage namespace names each pool's element width, not its dtype.

A key or a folder that says "2-byte KV" tells a bf16 page from an fp32 one,
and every test that pairs a dtype with one of another width passes. fp16
and bf16 (or the two fp8 kinds) are as wide as each other: a server started
with the other KV cache dtype finds this one's pages, of the right length
and with valid checksums, and serves their bits as its own numbers.

Must be caught by: S6 (conformance/suite/test_foreign_pages.py, the
'dtype_same_width' case).
"""

from __future__ import annotations

import dataclasses

import torch

from caches.config import DTYPES, CacheConfig
from caches.hiradix import HiRadixCache
from caches.storage.namespace import StorageNamespace
from caches.variants._adapter import VariantAdapter, hiradix_variant


class NamespaceDtypeByWidthCache(HiRadixCache):
    name = "namespace_dtype_by_width"

    def namespace_of(self, config: CacheConfig) -> StorageNamespace:
        namespace = super().namespace_of(config)
        width = {name: getattr(torch, name).itemsize for name in DTYPES}
        # The defect: the width stands for the dtype.
        return dataclasses.replace(namespace, dtype=tuple((pool, f"{width[dtype]}-byte") for pool, dtype in namespace.dtype))


def namespace_dtype_by_width() -> VariantAdapter:
    return hiradix_variant("namespace_dtype_by_width", NamespaceDtypeByWidthCache)
