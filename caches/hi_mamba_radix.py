"""hi_mamba_radix: full KV plus one mamba (recurrent) state per tree node.

A cached prefix is usable only up to the deepest matched node carrying a
state; host states have their own pin and LRU, reclaimable without evicting
KV (`evict_mamba_host`). That machinery: caches/hi_mamba/state_lru.py.

This file holds the cache's prefetch-termination decision
(`can_terminate_prefetch`), in the upstream mamba idiom: plain attribute
reads on one locked progress snapshot, and the cross-rank reduce only when
there is more than one rank. Everything else is the shared core
(caches/core/cache_base.py).
"""

from __future__ import annotations

from caches.core.arguments import checked_count
from caches.core.cache_base import HierarchicalCache
from caches.hi_mamba.state_lru import MAMBA, MambaStateHooks
from spec.groups import TP_RULE


class HiMambaRadixCache(HierarchicalCache):
    name = "hi_mamba_radix"
    supported_extra_pools = frozenset({MAMBA})
    required_extra_pools = frozenset({MAMBA})
    vote_group_rule = TP_RULE  # upstream's hi_mamba reduces over the tensor-parallel group only
    # Its hybrid mamba models run no attention context parallelism (upstream's fork: only attention-only models read
    # an attention CP group), so its tp group always spans the ranks that hold one request.
    runs_attention_context_parallel = False

    def make_hooks(self) -> MambaStateHooks:
        return MambaStateHooks(self.tree, self.copies)

    def evict_mamba_host(self, num_states: int) -> int:
        """Free up to `num_states` host mamba states, least recently used first (KV stays); returns the states freed."""
        self._ensure_usable("evict_mamba_host")
        return self.hooks.evict_host_states(checked_count("num_states", num_states))

    # --- the termination protocol (this class's own idiom) ----------------------

    def can_terminate_prefetch(self, operation) -> bool:
        progress = operation.progress()  # every field below comes from this one locked snapshot
        timed_out = False

        if self.prefetch_stop_policy == "best_effort":
            self._record_vote(operation, progress, True, timed_out)
            return True

        expected_tokens = len(progress.hash_value) * self.page_size
        kv_complete = expected_tokens > 0 and progress.completed_tokens == expected_tokens
        if kv_complete and progress.pool_transfers_present and not progress.pool_transfers_done:
            # The mamba state lands after KV: not complete until it has.
            kv_complete = False

        vote = False
        if self.prefetch_stop_policy == "wait_complete":
            vote = kv_complete
        elif self.prefetch_stop_policy == "timeout":
            elapsed = self.clock.now() - operation.start_time
            timed_out = elapsed > self._prefetch_budget_s(len(progress.hash_value))
            vote = kv_complete or timed_out

        self._record_vote(operation, progress, vote, timed_out)
        terminated = progress.terminated
        if self.world_size > 1:
            reduced = self.reducer.all_reduce_max(
                [1 - int(vote), int(progress.terminated)],
                name="vote_max",
                op=operation.request_id,
                step=self._step,
            )
            vote = reduced[0] == 0
            terminated = reduced[1] == 1
        # Stop when every rank may stop, or when any rank already stopped.
        vote = vote or terminated
        return vote

    def _prefetch_budget_s(self, hit_pages: int) -> float:
        """Seconds a timeout-policy prefetch may wait: grows with the hit, capped."""
        limits = self.termination
        hit_tokens = hit_pages * self.page_size
        return min(limits.timeout_max_s, limits.timeout_base_s + limits.timeout_per_ki_token_s * hit_tokens / 1024)
