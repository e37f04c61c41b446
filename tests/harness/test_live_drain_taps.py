"""The 0.5.19/0.5.20 drain's taps on hand-written objects shaped like its HiRadixCache and HiCacheController (no upstream code).

The drain takes an operation from prefetch_hit_queue and allocates its host
slots inline, then hands it to the IO thread through prefetch_buffer: the
slots are that operation's, the hit is recorded when it is handed on, and
nothing drained later inherits the context.
"""

from __future__ import annotations

import queue
from types import SimpleNamespace

import torch

from conformance.live.layouts.hiradix_drain.taps import tap_drain_cache, tap_inline_hit_allocation
from host_pool_sample import HostPool

from conformance.live.taps import Taps
from conformance.live.taps.host import tap_host_pool
from spec.clock import ManualClock
from spec.config import TerminationConfig
from spec.decision import VOTE_COLLECTIVE
from spec.trace import EventKind, TraceRecorder

PS = 4


def drain_rig(policy: str = "wait_complete"):
    taps = Taps(TraceRecorder(ManualClock(0.0)), TerminationConfig(policy=policy, page_size=PS), PS)
    host = HostPool(32)
    cc = SimpleNamespace(prefetch_hit_queue=queue.Queue(), prefetch_buffer=queue.Queue(), mem_pool_host=host)
    tap_host_pool(taps, host)
    tap_inline_hit_allocation(taps, cc)
    reduced: list[int] = []

    class Cache:
        ongoing_prefetch: dict = {}

        def _drain_storage_control_queues_impl(self, n_storage_hit):  # upstream's shape: get, allocate, hand on
            for _ in range(n_storage_hit):
                operation = cc.prefetch_hit_queue.get()
                if operation.storage_hit_count == 0:
                    self._revoke_pending_prefetch(operation.request_id)  # too short a hit: nothing allocated
                    continue
                operation.host_indices = cc.mem_pool_host.alloc(operation.storage_hit_count)
                cc.prefetch_buffer.put(operation)
            cc.mem_pool_host.alloc(PS)  # something else the scheduler allocates afterwards

        def can_terminate_prefetch(self, operation):
            return policy == "best_effort"

        def _all_reduce_attn_groups(self, tensor, op):
            reduced.append(int(tensor.item()))

        def check_prefetch_progress(self, request):
            operation = self.ongoing_prefetch[request]
            should = torch.tensor(int(operation.is_terminated() or self.can_terminate_prefetch(operation)))
            self._all_reduce_attn_groups(should, "max")
            return bool(should.item())

        def _revoke_pending_prefetch(self, req_id):
            self.ongoing_prefetch.pop(req_id, None)

        def _handle_prefetch_result(self, operation):
            return None

        def _insert_helper_host(self, node, key, host_value, hash_value):
            return 0

        def _sync_hicache_ready_counts(self):
            return None

    cache = Cache()
    tap_drain_cache(taps, cache, lambda operation: None)
    return taps, cc, cache, reduced


def operation(rid: str, pages: int):
    return SimpleNamespace(request_id=rid, storage_hit_count=pages * PS, hash_value=[f"h{i}" for i in range(pages)], host_indices=None,
                           completed_tokens=0, start_time=0.0, is_terminated=lambda: False)


def test_slots_the_drain_allocates_for_a_taken_hit_are_its_and_its_hit_is_what_it_hands_on():
    taps, cc, cache, _ = drain_rig()
    cc.prefetch_hit_queue.put(operation("r1", 2))
    cc.prefetch_hit_queue.put(operation("r2", 0))
    cache._drain_storage_control_queues_impl(2)
    events = taps.trace.events()
    allocs = [(e.op, len(e.slots)) for e in events if e.kind is EventKind.ALLOC]
    assert allocs == [("r1", 2 * PS), (None, PS)], "r2 was revoked, and what follows the drain's loop is the tree's, not r2's"
    assert [(e.op, e.value) for e in events if e.kind is EventKind.HIT] == [("r1", 2)]
    assert (taps.ctx.op, taps.ctx.phase) == (None, None), "the drain's context ends with it"


def test_the_check_records_the_policy_vote_and_its_max_is_the_vote_collective():
    taps, cc, cache, reduced = drain_rig("best_effort")
    op = operation("r1", 2)
    cache.ongoing_prefetch["r1"] = op
    assert cache.check_prefetch_progress("r1") is True
    events = taps.trace.events()
    assert [(e.op, e.value) for e in events if e.kind is EventKind.VOTE] == [("r1", True)]
    assert [(e.op, e.value) for e in events if e.kind is EventKind.COLLECTIVE] == [("r1", VOTE_COLLECTIVE)]
    assert reduced == [1]
