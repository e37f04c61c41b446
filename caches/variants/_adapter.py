"""The adapter every known-bad variant plugs in with: a built-in adapter, another cache class."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from caches import adapters as builtin
from caches.adapters import BuiltinAdapter, CacheSession, config_for
from caches.core.cache_base import HierarchicalCache


@dataclass(frozen=True)
class VariantAdapter(BuiltinAdapter):
    cache_class: type[HierarchicalCache] = HierarchicalCache

    def create(self, env: Any) -> CacheSession:
        groups = getattr(env, "process_groups", None)
        if groups is not None:
            return CacheSession(self.cache_class(config_for(env), trace=env.trace, clock=env.clock, process_groups=groups))
        cache = self.cache_class(config_for(env), trace=env.trace, clock=env.clock, process_group=env.process_group)
        return CacheSession(cache)


def variant_of(base: str, name: str, cache_class: type[HierarchicalCache]) -> VariantAdapter:
    """A variant of built-in cache `base`: its pools and capabilities, another cache class."""
    adapter = getattr(builtin, base)()
    return VariantAdapter(name, adapter.default_extra_pools, adapter.capabilities, cache_class=cache_class)


def hiradix_variant(name: str, cache_class: type[HierarchicalCache]) -> VariantAdapter:
    return variant_of("hiradix", name, cache_class)
