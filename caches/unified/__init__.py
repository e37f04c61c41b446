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
from caches.unified.swa import SlidingWindow, WindowData

__all__ = [
    "Component",
    "ComponentBase",
    "ComponentData",
    "ComponentLockError",
    "FullAttention",
    "Mamba",
    "SlidingWindow",
    "WindowData",
    "build_components",
]
