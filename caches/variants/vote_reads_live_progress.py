"""vote_reads_live_progress: hiradix whose vote takes its locked snapshot, records it, and decides on the live operation.

Upstream's window 5 in our own cache: the completion test reads
`completed_tokens`, `hash_value` and `pool_transfers_done` from the
operation as they are when the line runs, not from the snapshot it took
under the lock. The vote then answers for progress its recorded state
never held: IO that ends between the snapshot and the read moves the vote,
and a later check or another rank sees a vote its own state cannot explain.

Must be caught by: F2 (conformance/suite/test_snapshot_holds.py: IO moved
between the vote's snapshot and the vote), with the decision clause of the
vote it cast beside it.
"""

from __future__ import annotations

from caches.hiradix import HiRadixCache
from caches.variants._adapter import VariantAdapter, hiradix_variant
from spec.timeout import is_timed_out, timeout_budget


class LiveProgressVoteCache(HiRadixCache):
    name = "vote_reads_live_progress"

    def can_terminate_prefetch(self, operation) -> bool:
        progress = operation.progress()  # taken and recorded, but the completion test below does not use it
        timed_out = False
        if self.prefetch_stop_policy == "best_effort":
            self._record_vote(operation, progress, True, timed_out)
            return True
        # The defect: the live fields, outside the lock, long after the snapshot.
        hit_tokens = len(operation.hash_value) * self.page_size
        completed = hit_tokens > 0 and operation.completed_tokens == hit_tokens
        if completed and operation.pool_transfers and not operation.pool_transfers_done:
            completed = False
        can_terminate = completed
        if self.prefetch_stop_policy == "timeout":
            timed_out = is_timed_out(operation.start_time, self.clock.now(), timeout_budget(self.termination, len(progress.hash_value)))
            can_terminate = completed or timed_out
        self._record_vote(operation, progress, can_terminate, timed_out)
        states = self.reducer.all_reduce_max(
            [1 - int(can_terminate), int(progress.terminated)], name="vote_max", op=operation.request_id, step=self._step
        )
        return states[0] == 0 or states[1] == 1


def vote_reads_live_progress() -> VariantAdapter:
    return hiradix_variant("vote_reads_live_progress", LiveProgressVoteCache)
