"""Building blocks of the unified radix cache (caches/unified_radix.py): per-node components."""

from caches.unified.components import (
    Component,
    ComponentBase,
    ComponentData,
    ComponentLockError,
    FullAttention,
    Mamba,
    build_components,
)

__all__ = [
    "Component",
    "ComponentBase",
    "ComponentData",
    "ComponentLockError",
    "FullAttention",
    "Mamba",
    "build_components",
]
