"""Building blocks of the hi_mamba_radix cache (caches/hi_mamba_radix.py): the per-node state's LRU."""

from caches.hi_mamba.state_lru import MAMBA, MambaStateHooks

__all__ = ["MAMBA", "MambaStateHooks"]
