"""The caches by name, built from one validated config."""

from __future__ import annotations

import importlib
from typing import Any

from caches.config import CacheConfig
from spec.errors import ConfigError

# name -> "module:Class", imported on first use
CACHE_CLASSES = {
    "hiradix": "caches.hiradix:HiRadixCache",
    "unified_radix": "caches.unified_radix:UnifiedRadixCache",
    "hi_mamba_radix": "caches.hi_mamba_radix:HiMambaRadixCache",
}


def cache_class(name: str) -> type:
    if name not in CACHE_CLASSES:
        raise ConfigError("cache", name, "one of " + ", ".join(repr(n) for n in CACHE_CLASSES))
    module, cls = CACHE_CLASSES[name].split(":")
    return getattr(importlib.import_module(module), cls)


def build(name: str, config: CacheConfig | dict, **kwargs: Any):
    """Build cache `name` from a CacheConfig or a mapping of its fields.

    kwargs: trace, clock, process_group, storage (see HierarchicalCache).
    """
    if not isinstance(config, CacheConfig):
        config = CacheConfig.from_mapping(config)
    return cache_class(name)(config, **kwargs)
