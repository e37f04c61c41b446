"""upstream_windows: hiradix shaped like upstream after the guard fix, with windows 1-5 open.

What is wrong (DESIGN, "Windows that upstream still leaves open"):
1. best_effort returns before the guard, and nothing else stands between it
   and the insert: a prefetch whose KV completed is inserted while the
   extra-pool get still writes into the same slots;
2. the commit reads completed_tokens after the vote, so IO that moved in
   between (KV finished, extra get started) is inserted whole;
3. the commit inserts the KV prefix without clamping it to the extra pools:
   a partial prefetch (extra get skipped) or a short sidecar pairs KV with
   stale index pages;
4. a revoked operation is never marked terminated and its done flag stays
   false, so under wait_complete the scheduler waits for it forever;
5. the scheduler reads the progress fields one by one, without the lock.
The extra-pool guard itself is in place (keyed on completion, before the reduce).

Must be caught by: S1 and F3 (windows 1, 2, 3, 5 and the short sidecar, as
trace violations and by the fence oracle), S5 (stale index bytes loaded
back), F7 (window 4), all in conformance/suite/test_windows.py.
"""

from __future__ import annotations

from types import SimpleNamespace

from caches.core.commit import PrefetchCommit
from caches.core.operation import PrefetchOperation
from caches.hiradix import HiRadixCache
from caches.variants._adapter import VariantAdapter, hiradix_variant
from spec.errors import ConfigError
from spec.timeout import is_timed_out, timeout_budget
from spec.trace import HOST, EventKind


class UpstreamOperation(PrefetchOperation):
    """Window 4: revoke records and frees, but never terminates; done stays false."""

    def revoke(self, reason: str) -> bool:
        with self.lock:
            if self._terminated or self.revoked:
                return False
            self.revoked = reason
            self.trace.record(EventKind.REVOKE, op=self.request_id, value=reason)
            self._release_idle()
            return True

    def finish_transfers(self) -> None:
        with self.lock:
            if not self.revoked:
                self.pool_transfers_done = True
            self.trace.record(EventKind.IO_DONE, op=self.request_id)
        self.io_done.set()


class UnfencedCommit(PrefetchCommit):
    """Windows 2 and 3: the KV progress read after the vote, not clamped to the extra pools, in-flight IO not excluded."""

    def commit(self, op: PrefetchOperation, step: int) -> int:
        op.terminate(step)
        completed_tokens, hash_value = op.completed_tokens, list(op.hash_value)
        pages = min(completed_tokens // self.page_size, len(hash_value))
        tokens = self.reducer.all_reduce_min([pages], name="commit_min", op=op.request_id, step=step)[0] * self.page_size
        self.trace.record(EventKind.COMMIT, op=op.request_id, step=step, value=tokens)
        if tokens:
            self._insert_unfenced(op, tokens, hash_value)
        op.release_idle()
        self.prefetches.finish(op)
        self.stats.storage_hit_tokens += tokens
        self.stats.prefetches_committed += 1
        return tokens

    def _insert_unfenced(self, op: PrefetchOperation, tokens: int, hash_value: list[str]) -> None:
        kv_slots = op.plan("kv").slots[:tokens]
        result = self.tree.insert_host(op.last_node, op.tokens[:tokens], kv_slots, hash_value[: tokens // self.page_size])
        duplicates = set(result.duplicate_slots.tolist())
        inserted = [s for s in kv_slots.tolist() if s not in duplicates]
        with op.lock:
            # The slots now belong to the tree, whatever IO still runs into them.
            for pool in self.token_pools:
                op._owned[pool].difference_update(inserted)
            for slot in inserted:
                op._holders.pop(("kv", slot), None)
        for pool in self.token_pools:
            self.trace.record(EventKind.INSERT, op=op.request_id, pool=pool, space=HOST, slots=inserted)
        if duplicates:
            for pool in self.token_pools:
                op.release(pool, sorted(duplicates))


class UpstreamWindowsCache(HiRadixCache):
    name = "upstream_windows"
    operation_class = UpstreamOperation  # window 4
    commit_class = UnfencedCommit  # windows 2 and 3

    def can_terminate_prefetch(self, operation) -> bool:
        can_terminate = True
        timed_out = False

        if self.prefetch_stop_policy == "best_effort":
            self._record_unlocked_vote(operation, can_terminate, timed_out)
            return can_terminate

        # Window 5: each field read on its own, without the operation's lock.
        if len(operation.hash_value) == 0:
            completed = False
        else:
            completed = operation.completed_tokens == len(operation.hash_value) * self.page_size

        if completed and getattr(operation, "pool_transfers", None) and not getattr(operation, "pool_transfers_done", True):
            completed = False

        if self.prefetch_stop_policy == "wait_complete":
            can_terminate = completed
        elif self.prefetch_stop_policy == "timeout":
            budget = timeout_budget(self.termination, len(operation.hash_value))
            timed_out = is_timed_out(operation.start_time, self.clock.now(), budget)
            can_terminate = completed or timed_out

        self._record_unlocked_vote(operation, can_terminate, timed_out)
        states = self.reducer.all_reduce_max(
            [1 - int(can_terminate), int(operation.is_terminated())], name="vote_max", op=operation.request_id, step=self._step
        )
        return states[0] == 0 or states[1] == 1

    def _record_unlocked_vote(self, op: PrefetchOperation, vote: bool, timed_out: bool) -> None:
        if not self.trace.enabled:
            return
        seen = SimpleNamespace(
            hash_value=op.hash_value,
            completed_tokens=op.completed_tokens,
            pool_transfers_present=bool(op.pool_transfers),
            pool_transfers_done=op.pool_transfers_done,
            terminated=op.is_terminated(),
        )
        try:
            self._record_vote(op, seen, vote, timed_out)
        except ConfigError:
            # A torn read (window 5) can be a state that never existed: record the vote alone.
            self.trace.record(EventKind.VOTE, op=op.request_id, step=self._step, value=bool(vote))


def upstream_windows() -> VariantAdapter:
    return hiradix_variant("upstream_windows", UpstreamWindowsCache)


__all__ = ["UnfencedCommit", "UpstreamWindowsCache", "UpstreamOperation", "upstream_windows"]
