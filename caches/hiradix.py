"""hiradix: the plain hierarchical radix cache, KV with an optional INDEXER side pool.

This file holds the cache's prefetch-termination decision
(`can_terminate_prefetch`), written in the upstream idiom where the pool
fields are read with getattr (operations from other code paths may lack
them). Everything else is the shared core (caches/core/cache_base.py).
"""

from __future__ import annotations

from caches.core.cache_base import HierarchicalCache
from spec.timeout import is_timed_out, timeout_budget


class HiRadixCache(HierarchicalCache):
    name = "hiradix"
    supported_extra_pools = frozenset({"indexer"})

    def can_terminate_prefetch(self, operation) -> bool:
        progress = operation.progress()  # one snapshot under the operation's lock
        can_terminate = True
        timed_out = False

        if self.prefetch_stop_policy == "best_effort":
            self._record_vote(operation, progress, can_terminate, timed_out)
            return can_terminate

        if len(progress.hash_value) == 0:
            completed = False
        else:
            completed = progress.completed_tokens == len(progress.hash_value) * self.page_size

        # Extra-pool guard: KV alone is not completion while side pools are still
        # being written. Keyed on `completed`, before the cross-rank reduce.
        if completed and getattr(progress, "pool_transfers_present", False) and not getattr(progress, "pool_transfers_done", True):
            completed = False

        if self.prefetch_stop_policy == "wait_complete":
            can_terminate = completed
        elif self.prefetch_stop_policy == "timeout":
            budget = timeout_budget(self.termination, len(progress.hash_value))
            timed_out = is_timed_out(operation.start_time, self.clock.now(), budget)
            can_terminate = completed or timed_out

        self._record_vote(operation, progress, can_terminate, timed_out)
        states = self.reducer.all_reduce_max(
            [1 - int(can_terminate), int(progress.terminated)],
            name="vote_max",
            op=operation.request_id,
            step=self._step,
        )
        can_terminate = states[0] == 0
        operation_terminated = states[1] == 1
        # Terminate if every rank may stop, or any rank already stopped.
        return can_terminate or operation_terminated
