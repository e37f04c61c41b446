"""The adapter every known-bad variant plugs in with: a built-in adapter, another cache class."""

from __future__ import annotations

from dataclasses import dataclass

from caches import adapters as builtin
from caches.adapters import BuiltinAdapter
from caches.core.cache_base import HierarchicalCache


@dataclass(frozen=True)
class VariantAdapter(BuiltinAdapter):
    variant_class: type[HierarchicalCache] = HierarchicalCache

    def cache_class(self) -> type[HierarchicalCache]:
        return self.variant_class


def variant_of(base: str, name: str, cache_class: type[HierarchicalCache]) -> VariantAdapter:
    """A variant of built-in cache `base`: its pools and capabilities, another cache class."""
    adapter = getattr(builtin, base)()
    return VariantAdapter(name, adapter.default_extra_pools, adapter.capabilities, variant_class=cache_class)


def hiradix_variant(name: str, cache_class: type[HierarchicalCache]) -> VariantAdapter:
    return variant_of("hiradix", name, cache_class)
