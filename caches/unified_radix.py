"""unified_radix: one radix tree whose nodes carry per-component data.

Components (caches/unified/components.py, caches/unified/swa.py) are chosen
from config.extra_pools: FullAttention always (the "kv" pool, with the
indexer as a sidecar token pool sharing the KV slot numbers when enabled),
Mamba when "mamba" is enabled, SlidingWindow when "swa" is (its own slot
group, window data per node, LRUs and eviction). Each component has its own
LRU and lock counts per node; device eviction consults every component (a
node any component locks stays); the Mamba and SlidingWindow components drop
their own data by their own LRUs without touching KV (`evict_component_host`,
`evict_component_device`), cascading to the components below them. A match
ends at the deepest node every component accepts as a match end (Mamba needs
its state there, SlidingWindow the whole window before it). How the core's
paths consult the components: caches/unified/hooks.py.

This file holds the cache's prefetch-termination decision
(`can_terminate_prefetch`), in its own idiom; everything else is the shared
core (caches/core/cache_base.py).
"""

from __future__ import annotations

from caches.core.arguments import checked_count
from caches.core.cache_base import HierarchicalCache
from caches.core.hooks import CacheHooks
from caches.errors import CacheArgumentError
from caches.unified.components import ComponentBase, build_components
from caches.unified.hooks import UnifiedHooks
from caches.unified.swa import SlidingWindow


class UnifiedRadixCache(HierarchicalCache):
    name = "unified_radix"
    supported_extra_pools = frozenset({"indexer", "mamba", "swa"})
    window_component: type[SlidingWindow] = SlidingWindow

    def make_hooks(self) -> CacheHooks:
        self.components: dict[str, ComponentBase] = build_components(
            self.tree, self.copies, self.token_pools, self.config.extra_pools, lambda count: self.eviction.evict_host(count)
        )
        window: SlidingWindow | None = None
        if "swa" in self.config.extra_pools:
            # The paths exist once the constructor returns: eviction is reached through them.
            window = self.window_component(
                self.tree, self.copies, self.slots, self.device_pools["swa"],
                evict_device_nodes=lambda nodes: self.eviction.evict_path(nodes),
                evict_host_nodes=lambda nodes: self.eviction.evict_host_nodes(nodes),
                cascade=lambda node, tier: hooks.cascade(node, tier, window),
            )
            self.components[window.name] = window
        hooks = UnifiedHooks(self.tree, self.components)
        return hooks

    def component(self, name: str) -> ComponentBase:
        if name not in self.components:
            raise CacheArgumentError("component", name, "one of " + ", ".join(repr(c) for c in self.components))
        return self.components[name]

    def evict_component_host(self, name: str, count: int) -> int:
        """Host eviction by one component's own LRU.

        "mamba": drop up to `count` host states (KV stays); "swa": at least
        `count` host window slots (inner nodes keep their KV, a host-only leaf
        leaves whole); "full_attention": `count` tokens of host KV, through
        the tree (the node leaves with every component's data).
        """
        self._ensure_usable("evict_component_host")
        evicted = self.component(name).evict_host(checked_count("count", count))
        self.copies.poll()
        return evicted

    def evict_component_device(self, name: str, count: int) -> int:
        """Device eviction by one component's own LRU: "swa" only (at least `count` device window slots)."""
        self._ensure_usable("evict_component_device")
        component = self.component(name)
        if not isinstance(component, SlidingWindow):
            raise CacheArgumentError("component", name, "'swa' (the other components' device data leaves with the tree's eviction: evict())")
        evicted = component.evict_device(checked_count("count", count))
        self.copies.poll()
        return evicted

    # --- the prefetch-termination protocol (this cache's own) ----------------------

    def can_terminate_prefetch(self, operation) -> bool:
        snapshot = operation.progress()  # one locked snapshot: every field below is read from it
        timed_out = False

        if self.prefetch_stop_policy == "best_effort":
            self._record_vote(operation, snapshot, True, timed_out)
            return True

        hit_pages = len(snapshot.hash_value)
        all_tokens_in = hit_pages > 0 and snapshot.completed_tokens == hit_pages * self.page_size
        # Sidecar components (indexer pages, mamba state) arrive after full KV:
        # KV alone is not completion. Keyed on completion, before the reduce.
        if all_tokens_in and snapshot.pool_transfers_present and not snapshot.pool_transfers_done:
            all_tokens_in = False

        vote = False
        if self.prefetch_stop_policy == "wait_complete":
            vote = all_tokens_in
        elif self.prefetch_stop_policy == "timeout":
            limits = self.termination
            hit_tokens = hit_pages * self.page_size
            budget_s = min(limits.timeout_max_s, limits.timeout_base_s + limits.timeout_per_ki_token_s * hit_tokens / 1024)
            timed_out = self.clock.now() - operation.start_time > budget_s
            vote = all_tokens_in or timed_out

        self._record_vote(operation, snapshot, vote, timed_out)
        # Always reduced (a no-op on one rank), so every rank runs the same collectives.
        ranks_voting_no, ranks_terminated = self.reducer.all_reduce_max(
            [1 - int(vote), int(snapshot.terminated)],
            name="vote_max",
            op=operation.request_id,
            step=self._step,
        )
        # Every rank may stop, or some rank already stopped (it cannot resume).
        return ranks_voting_no == 0 or ranks_terminated == 1
