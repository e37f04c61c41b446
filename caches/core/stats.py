"""Counters a cache keeps about its own traffic (read by tests and benchmarks)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class CacheStats:
    storage_hit_tokens: int = 0  # committed by prefetches: a hit is reported only for loaded data (F8)
    prefetches_started: int = 0
    prefetches_committed: int = 0
    loaded_back_tokens: int = 0
