"""guard_on_vote: the extra-pool guard keyed on the vote instead of the completion predicate.

It forces the *vote* to no while pool transfers are pending, after the
policy branch. Under timeout that also vetoes "timed out": a slow extra pool
stalls the scheduler past its deadline, which the spec forbids (the guard
sets completion; timed out still votes yes). Upstream's reviewer asked for
the completion key for exactly this reason.

Must be caught by: D5 (decision table rows "timeout / timed out / pending");
L2 (a rank past its deadline votes yes).
"""

from __future__ import annotations

from caches.hiradix import HiRadixCache
from caches.variants._adapter import VariantAdapter, hiradix_variant
from spec.timeout import is_timed_out, timeout_budget


class GuardOnVoteCache(HiRadixCache):
    name = "guard_on_vote"

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

        # The defect: the guard forces the vote, not the completion predicate.
        if progress.pool_transfers_present and not progress.pool_transfers_done:
            can_terminate = False

        self._record_vote(operation, progress, can_terminate, timed_out)
        states = self.reducer.all_reduce_max(
            [1 - int(can_terminate), int(progress.terminated)], name="vote_max", op=operation.request_id, step=self._step
        )
        return states[0] == 0 or states[1] == 1


def guard_on_vote() -> VariantAdapter:
    return hiradix_variant("guard_on_vote", GuardOnVoteCache)
