"""hiradix: the plain hierarchical radix cache, KV with an optional INDEXER side pool.

Owns its prefetch-termination code, written in the upstream idiom where the
pool fields are read with getattr (operations from other code paths may lack
them). Everything else is the shared core.
"""

from __future__ import annotations

from typing import Sequence

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

    def check_prefetch_progress(self, request_ids: Sequence[str]) -> dict[str, int]:
        """One scheduler step over the agreed list of request ids; returns the committed tokens of finished ones."""
        request_ids = self._checked_request_ids(request_ids)  # one argument rule for every cache
        step = self._begin_step()
        finished: dict[str, int] = {}
        for request_id in request_ids:
            operation = self.ongoing_prefetch.get(request_id)
            if operation is None:
                self._join_untracked(request_id, step)
                continue
            if self.can_terminate_prefetch(operation):
                finished[request_id] = self._commit_prefetch(operation, step)
        return finished
