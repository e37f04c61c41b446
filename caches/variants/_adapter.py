"""The adapter every known-bad variant plugs in with: the built-in adapter, another cache class."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from caches.adapters import BuiltinAdapter, CacheSession, config_for
from caches.core.cache_base import HierarchicalCache

# The variants are hiradix derivatives: same pools and capabilities.
HIRADIX_POOLS = ("indexer",)
HIRADIX_CAPABILITIES = frozenset({"multi_rank", "held_copies", "pool:indexer"})


@dataclass(frozen=True)
class VariantAdapter(BuiltinAdapter):
    cache_class: type[HierarchicalCache] = HierarchicalCache

    def create(self, env: Any) -> CacheSession:
        cache = self.cache_class(config_for(env), trace=env.trace, clock=env.clock, process_group=env.process_group)
        return CacheSession(cache)


def hiradix_variant(name: str, cache_class: type[HierarchicalCache]) -> VariantAdapter:
    return VariantAdapter(name, HIRADIX_POOLS, HIRADIX_CAPABILITIES, cache_class)
