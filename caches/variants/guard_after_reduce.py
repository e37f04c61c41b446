"""guard_after_reduce: the extra-pool guard applied after the cross-rank reduce.

Every rank contributes its unguarded vote to the MAX all-reduce and applies
the guard to the combined result afterwards. With one rank the decision it
returns often looks right, but the vote it contributed (and recorded) is yes
while transfers are pending; with several ranks one rank stops while its
peers keep waiting, and they insert different lengths.

Must be caught by: X3 (the vote entering the collective includes the guard);
D3 (the recorded vote against the spec's vote for the state it saw).
"""

from __future__ import annotations

from caches.hiradix import HiRadixCache
from caches.variants._adapter import VariantAdapter, hiradix_variant
from spec.timeout import is_timed_out, timeout_budget


class GuardAfterReduceCache(HiRadixCache):
    name = "guard_after_reduce"

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
        can_terminate = states[0] == 0
        # The defect: the guard runs on the combined result, after the reduce.
        if completed and progress.pool_transfers_present and not progress.pool_transfers_done:
            can_terminate = False
        return can_terminate or states[1] == 1


def guard_after_reduce() -> VariantAdapter:
    return hiradix_variant("guard_after_reduce", GuardAfterReduceCache)
