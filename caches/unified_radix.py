"""unified_radix: one radix tree whose nodes carry per-component data.

Components (caches/unified/components.py) are chosen from config.extra_pools:
FullAttention always (the "kv" pool, with the indexer as a sidecar token pool
sharing the KV slot numbers when enabled), Mamba when "mamba" is enabled.
Each component has its own LRU and lock counts per node; device eviction
consults every component (a node any component locks stays), and the Mamba
component may drop host states by its own LRU without touching KV
(`evict_component_host`). A match ends at the deepest node every component
accepts as a match end (Mamba needs its state there).

A sliding-window component is not provided. It would own its pool, hit
policy (the pages within the window before the match end), LRU and locks
like the others, but it needs per-component slot arrays in the tree: a node
whose full KV stays while its out-of-window pages are freed. The shared core
keeps one slot array per node for all token pools (`value`/`host_value`) and
does not provide per-component arrays yet, so there is nothing for such a
component to own.

The prefetch-termination protocol (`can_terminate_prefetch`,
`check_prefetch_progress`) is this cache's own code, in its own idiom;
everything else is the shared core.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

from caches.config import CacheConfig
from caches.core.arguments import checked_count
from caches.core.cache_base import STATE_GROUP, HierarchicalCache
from caches.core.operation import PrefetchOperation, Progress
from caches.core.tree import InsertResult, MatchResult, TreeNode
from caches.errors import CacheArgumentError
from caches.storage import StorageBackend
from caches.unified.components import ComponentBase, build_components
from spec.clock import Clock
from spec.trace import TraceRecorder


class UnifiedRadixCache(HierarchicalCache):
    name = "unified_radix"
    supported_extra_pools = frozenset({"indexer", "mamba"})

    def __init__(
        self,
        config: CacheConfig,
        *,
        trace: TraceRecorder | None = None,
        clock: Clock | None = None,
        process_group: Any = None,
        storage: StorageBackend | None = None,
    ) -> None:
        super().__init__(config, trace=trace, clock=clock, process_group=process_group, storage=storage)
        self.components: dict[str, ComponentBase] = build_components(self, config.extra_pools)

    # --- components -------------------------------------------------------------

    def component(self, name: str) -> ComponentBase:
        if name not in self.components:
            raise CacheArgumentError("component", name, "one of " + ", ".join(repr(c) for c in self.components))
        return self.components[name]

    def lock_components(self, node: TreeNode) -> None:
        for component in self.components.values():
            component.lock(node)

    def unlock_components(self, node: TreeNode) -> None:
        for component in self.components.values():
            component.unlock(node)

    def evict_component_host(self, name: str, count: int) -> int:
        """Host eviction by one component's own LRU.

        "mamba": drop up to `count` host states (KV stays); "full_attention":
        `count` tokens of host KV, through the tree (the node leaves with every
        component's data).
        """
        self._ensure_usable("evict_component_host")
        evicted = self.component(name).evict_host(checked_count("count", count))
        self.copies.poll()
        return evicted

    # --- matching: the deepest end every component accepts ------------------------

    def match_prefix(self, tokens: Sequence[int]) -> MatchResult:
        full = super().match_prefix(tokens)
        path = self.tree.path_to(full.host_node)
        end_index = len(path)
        while end_index and not all(c.accepts_match_end(path[end_index - 1]) for c in self.components.values()):
            end_index -= 1
        kept = path[:end_index]
        for node in kept:
            for component in self.components.values():
                component.touch(node)
        if end_index == len(path):
            return full
        return self._truncated(full, kept)

    def _truncated(self, full: MatchResult, kept: list[TreeNode]) -> MatchResult:
        end = kept[-1] if kept else self.tree.root
        end_tokens = sum(len(node.key) for node in kept)
        backed_up = self.tree.root
        for node in kept:
            if node.host_value is None:
                break
            backed_up = node
        if end.value is not None:  # served from the device: no host part
            return MatchResult(
                device_slots=full.device_slots[:end_tokens], device_node=end, host_node=end,
                host_hit_tokens=0, matched_tokens=end_tokens, deepest_backed_up_node=backed_up,
            )
        # Host-only end: the device part is unchanged (device nodes form a
        # prefix, so it lies above the end); load_back(host_node) brings the rest.
        return MatchResult(
            device_slots=full.device_slots, device_node=full.device_node, host_node=end,
            host_hit_tokens=end_tokens - len(full.device_slots), matched_tokens=end_tokens,
            deepest_backed_up_node=backed_up,
        )

    # --- component hooks on the core's paths -------------------------------------

    def insert(self, tokens: Sequence[int], device_slots: torch.Tensor, *, states: Mapping[str, int] | None = None) -> InsertResult:
        result = super().insert(tokens, device_slots, states=states)
        for node in self.tree.path_to(result.node):
            for component in self.components.values():
                component.on_insert(node)
        return result

    def _insert_prefetched(self, op: PrefetchOperation, progress: Progress, pages: int, attach: set[str]) -> TreeNode:
        node = super()._insert_prefetched(op, progress, pages, attach)
        for n in self.tree.path_to(node):
            for component in self.components.values():
                component.on_insert(n)
        return node

    def _on_split(self, head: TreeNode, tail: TreeNode) -> None:
        super()._on_split(head, tail)
        # The tree exists before the components do (built after the core's __init__).
        for component in getattr(self, "components", {}).values():
            component.on_split(head, tail)

    def _can_evict_device(self, node: TreeNode) -> bool:
        return super()._can_evict_device(node) and all(c.device_evictable(node) for c in self.components.values())

    def _can_evict_host(self, node: TreeNode) -> bool:
        return super()._can_evict_host(node) and all(c.host_evictable(node) for c in self.components.values())

    def _drop_device(self, node: TreeNode) -> None:
        deleted = node.host_value is None  # no backup: the node leaves the tree
        super()._drop_device(node)
        for component in self.components.values():
            component.on_device_evict(node, deleted=deleted)

    def _drop_host(self, node: TreeNode) -> None:
        super()._drop_host(node)
        for component in self.components.values():
            component.on_host_evict(node)

    def _evict_host_for(self, group: str, short: int) -> None:
        # Room for a host state: drop the least recently used mamba state first,
        # keeping KV; only then take whole nodes.
        if group == STATE_GROUP and "mamba" in self.components:
            short -= self.components["mamba"].evict_host(short)
            if short <= 0:
                return
        super()._evict_host_for(group, short)

    def load_back(self, node: TreeNode, quota_tokens: int | None = None) -> torch.Tensor | None:
        self._load_back_arguments(node, quota_tokens)
        # Every component locks the target while slots are made: eviction for
        # room must take neither the path nor its state.
        self.lock_components(node)
        try:
            return super().load_back(node, quota_tokens)
        finally:
            self.unlock_components(node)

    def prefetch_from_storage(self, request_id: str, tokens: Sequence[int]) -> int:
        requested = super().prefetch_from_storage(request_id, tokens)
        operation = self.ongoing_prefetch.get(request_id) if requested else None
        if operation is not None:
            # The prefetch extends this node: every component keeps its host data.
            for component in self.components.values():
                component.pin_host(operation.last_node)
        return requested

    def _finish_prefetch(self, op: PrefetchOperation) -> None:
        for component in self.components.values():
            component.unpin_host(op.last_node)
        super()._finish_prefetch(op)

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

    def check_prefetch_progress(self, request_ids: Sequence[str]) -> dict[str, int]:
        """One scheduler step over the agreed, ordered request ids; {id: committed tokens} of those finished."""
        request_ids = self._checked_request_ids(request_ids)  # one argument rule for every cache
        step = self._begin_step()
        committed: dict[str, int] = {}
        for rid in request_ids:
            op = self.ongoing_prefetch.get(rid)
            if op is None:
                self._join_untracked(rid, step)
                continue
            if self.can_terminate_prefetch(op):
                committed[rid] = self._commit_prefetch(op, step)
        return committed
