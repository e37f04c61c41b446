"""guard_missing: hiradix without the extra-pool guard (the bug before the upstream fix).

Under wait_complete and timeout it declares a prefetch complete as soon as KV
completed, while the extra-pool get (the indexer) is still running: the vote
is yes with pool transfers pending.

Must be caught by: D3 (the decision table, rows "full / pending"); the
race in conformance/suite/test_windows.py where the scheduler checks while the
extra-pool get is held (the check must not terminate).
"""

from __future__ import annotations

from caches.hiradix import HiRadixCache
from caches.variants._adapter import VariantAdapter, hiradix_variant
from spec.timeout import is_timed_out, timeout_budget


class GuardMissingCache(HiRadixCache):
    name = "guard_missing"

    def can_terminate_prefetch(self, operation) -> bool:
        progress = operation.progress()
        can_terminate = True
        timed_out = False

        if self.prefetch_stop_policy == "best_effort":
            self._record_vote(operation, progress, can_terminate, timed_out)
            return can_terminate

        if len(progress.hash_value) == 0:
            completed = False
        else:
            completed = progress.completed_tokens == len(progress.hash_value) * self.page_size
        # (no pool_transfers_done guard here: the defect)

        if self.prefetch_stop_policy == "wait_complete":
            can_terminate = completed
        elif self.prefetch_stop_policy == "timeout":
            budget = timeout_budget(self.termination, len(progress.hash_value))
            timed_out = is_timed_out(operation.start_time, self.clock.now(), budget)
            can_terminate = completed or timed_out

        self._record_vote(operation, progress, can_terminate, timed_out)
        states = self.reducer.all_reduce_max(
            [1 - int(can_terminate), int(progress.terminated)], name="vote_max", op=operation.request_id, step=self._step
        )
        return states[0] == 0 or states[1] == 1


def guard_missing() -> VariantAdapter:
    return hiradix_variant("guard_missing", GuardMissingCache)
