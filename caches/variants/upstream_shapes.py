"""upstream_pre_fix and upstream_vote_forcing: hiradix's decision written the way upstream writes it, before and after PR #27550.

Both follow upstream's HiRadixCache.can_terminate_prefetch line for line in
shape: best_effort returns first; `completed` from KV alone; the policy
branches (timeout through an `is_prefetch_timeout` helper; an unknown policy
votes yes); then, in the fixed version only, the extra-pool guard after the
branches, conditioned on `completed` and forcing the vote to no; then the
[1 - vote, terminated] MAX reduce, skipped on a single rank (as upstream's
`_all_reduce_attn_groups` skips it when no group has more than one rank).
Unlike upstream, they read one locked snapshot (window 5 is another
variant's subject) and record the VOTE the trace contract asks for.

Must be caught by, and only by:
- upstream_pre_fix: D3 (no guard: KV completion alone ends the wait while the
  extra-pool get still writes);
- upstream_vote_forcing: D5 and L2 (the guard vetoes "timed out": the timeout
  cannot end the wait while pool IO is pending).
spec/upstream.py models both; the report matches each to its shape.
"""

from __future__ import annotations

from caches.hiradix import HiRadixCache
from caches.variants._adapter import VariantAdapter, hiradix_variant


class UpstreamPreFixCache(HiRadixCache):
    name = "upstream_pre_fix"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.is_prefetch_timeout = self._prefetch_timeout_check_linear_func

    def _prefetch_timeout_check_linear_func(self, operation, progress) -> bool:
        limits = self.termination
        num_tokens = len(progress.hash_value) * self.page_size
        timeout = min(limits.timeout_max_s, limits.timeout_base_s + limits.timeout_per_ki_token_s * num_tokens / 1024)
        return self.clock.now() - operation.start_time > timeout

    def _guard(self, can_terminate: bool, completed: bool, progress) -> bool:
        return can_terminate  # before PR #27550: no extra-pool guard

    def can_terminate_prefetch(self, operation) -> bool:
        progress = operation.progress()
        can_terminate = True

        if self.prefetch_stop_policy == "best_effort":
            self._record_vote(operation, progress, can_terminate, False)
            return can_terminate

        if len(progress.hash_value) == 0:
            completed = False
        else:
            completed = progress.completed_tokens == len(progress.hash_value) * self.page_size

        timed_out = self.is_prefetch_timeout(operation, progress)
        if self.prefetch_stop_policy == "wait_complete":
            can_terminate = completed
        elif self.prefetch_stop_policy == "timeout":
            can_terminate = completed or timed_out
        else:
            return True

        can_terminate = self._guard(can_terminate, completed, progress)

        operation_terminated = progress.terminated
        self._record_vote(operation, progress, can_terminate, timed_out)
        if self.world_size > 1:
            states = self.reducer.all_reduce_max(
                [1 - int(can_terminate), int(operation_terminated)], name="vote_max", op=operation.request_id, step=self._step
            )
            can_terminate = states[0] == 0
            operation_terminated = states[1] == 1
        return can_terminate or operation_terminated


class UpstreamVoteForcingCache(UpstreamPreFixCache):
    name = "upstream_vote_forcing"

    def _guard(self, can_terminate: bool, completed: bool, progress) -> bool:
        # PR #27550's guard: keyed on completion, but it forces the vote (vetoing "timed out" too).
        if completed and progress.pool_transfers_present and not progress.pool_transfers_done:
            can_terminate = False
        return can_terminate


def upstream_pre_fix() -> VariantAdapter:
    return hiradix_variant("upstream_pre_fix", UpstreamPreFixCache)


def upstream_vote_forcing() -> VariantAdapter:
    return hiradix_variant("upstream_vote_forcing", UpstreamVoteForcingCache)
