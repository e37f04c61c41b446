"""What every path of one cache shares: its configuration, tree, memory and bookkeeping.

The cache builds one CoreParts and hands it to each path (write, eviction,
prefetch, commit, load-back); what else a path needs (a reducer, the
storage controller's queues, another path) it names in its own constructor.
"""

from __future__ import annotations

from dataclasses import dataclass

from caches.config import CacheConfig
from caches.core.assembly import CachePools
from caches.core.copies import CopyTracker
from caches.core.hooks import CacheHooks
from caches.core.slots import SlotAccounting
from caches.core.stats import CacheStats
from caches.core.tree import RadixTree
from spec.clock import Clock
from spec.trace import TraceRecorder


@dataclass(frozen=True)
class CoreParts:
    who: str  # "<cache> rank <r>", for messages
    config: CacheConfig
    tree: RadixTree
    slots: SlotAccounting
    copies: CopyTracker
    pools: CachePools
    trace: TraceRecorder
    clock: Clock
    hooks: CacheHooks
    stats: CacheStats


class CorePart:
    """Base of the paths: the shared parts as attributes."""

    def __init__(self, parts: CoreParts) -> None:
        self.who = parts.who
        self.config = parts.config
        self.page_size = parts.config.page_size
        self.tree = parts.tree
        self.slots = parts.slots
        self.copies = parts.copies
        self.pools = parts.pools
        self.trace = parts.trace
        self.clock = parts.clock
        self.hooks = parts.hooks
        self.stats = parts.stats
