"""PrefetchOperation: the lock every fence clause depends on (F1, F2, F5, F7, S3).

Any thread may release slots; only drain() (the scheduler, at agreed points)
returns them to the allocator and records FREE. Real allocators receive the
freed slots, so a double free or a leak shows up as a SlotError or a wrong
free count; the trace is checked with spec.check. Threads are ordered with
threading.Event only; every wait is bounded.
"""

from __future__ import annotations

import threading

import pytest
import torch

from conformance.bounds import WAIT_S
from caches.core.allocator import PageAllocator
from caches.core.hashing import page_hashes
from caches.core.operation import FenceError, PoolPlan, PrefetchOperation
from spec import check
from spec.clock import ManualClock
from spec.fence import HitPolicy, PoolProgress
from spec.trace import HOST, EventKind, TraceRecorder

PS = 4


class Harness:
    """One operation over real allocators: kv + indexer share slot numbers, mamba has its own."""

    def __init__(self, pages: int = 3, *, indexer: bool = True, mamba: bool = False) -> None:
        self.trace = TraceRecorder(ManualClock(10.0))
        self.allocators = {"kv": PageAllocator(8, PS, name="host kv"), "state": PageAllocator(4, 1, name="host state")}
        self.slots = self.allocators["kv"].alloc(pages * PS)
        extras = []
        if indexer:
            extras.append(PoolPlan("indexer", HitPolicy.ALL_PAGES, self.slots, "kv"))
        if mamba:
            self.state_slot = self.allocators["state"].alloc(1)
            extras.append(PoolPlan("mamba", HitPolicy.TRAILING_PAGES, self.state_slot, "state", per_page=False))
        for plan in [PoolPlan("kv", HitPolicy.ALL_PAGES, self.slots, "kv"), *extras]:
            self.trace.record(EventKind.ALLOC, op="r1", pool=plan.pool, space=HOST, slots=plan.slots)
        self.op = PrefetchOperation(
            "r1",
            requested_hashes=page_hashes(list(range(pages * PS)), PS),
            kv=PoolPlan("kv", HitPolicy.ALL_PAGES, self.slots, "kv"),
            extras=extras,
            page_size=PS,
            start_time=10.0,
            trace=self.trace,
            free_slots=lambda group, slots: self.allocators[group].free(slots),
        )

    def free_kv_slots(self) -> int:
        return self.allocators["kv"].free_slots()

    def page(self, index: int) -> list[int]:
        return self.slots[index * PS : (index + 1) * PS].tolist()

    def frees(self, pool: str) -> list[int]:
        return [s for e in self.trace.events() if e.kind is EventKind.FREE and e.pool == pool for s in e.slots]

    def violations(self, *clauses: str):
        return check(self.trace.trace(), None, clauses=list(clauses) or ["S1", "S2", "S3", "F3"])


def test_fresh_operation_expects_nothing_and_reports_pending_pool_transfers():
    h = Harness()
    p = h.op.progress()
    assert p.hash_value == () and p.completed_tokens == 0
    assert p.pool_transfers_present and not p.pool_transfers_done
    assert not p.terminated and p.in_flight == {}
    assert p.pool_progress == (PoolProgress("indexer", HitPolicy.ALL_PAGES, 0),)
    assert not h.op.io_done.is_set()
    assert torch.equal(h.op.host_indices, h.slots)


def test_without_pool_transfers_the_done_flag_starts_true():
    p = Harness(indexer=False).op.progress()
    assert not p.pool_transfers_present and p.pool_transfers_done


def test_increment_publishes_until_terminated():
    h = Harness()
    assert h.op.increment(PS)
    assert h.op.progress().completed_tokens == PS
    h.op.terminate(step=1)
    assert h.op.increment(PS) is False
    assert h.op.progress().completed_tokens == PS


def test_set_hit_trims_to_the_agreed_pages_and_drain_returns_the_rest_once():
    h = Harness(pages=3)
    before = h.free_kv_slots()
    assert h.op.set_hit(1)
    assert len(h.op.progress().hash_value) == 1
    # Released on the prefetch thread, freed only when the scheduler drains.
    assert h.free_kv_slots() == before and h.frees("kv") == []
    # Two pages beyond the hit, shared by kv and indexer: returned to the allocator once.
    assert h.op.drain() == 2 * PS
    assert h.free_kv_slots() == before + 2 * PS
    assert h.op.drain() == 0
    assert sorted(h.frees("kv")) == sorted(h.page(1) + h.page(2))
    assert sorted(h.frees("indexer")) == sorted(h.page(1) + h.page(2))
    hits = [e.value for e in h.trace.events() if e.kind is EventKind.HIT]
    assert hits == [1]
    assert h.op.owned_slots() == {"kv": h.page(0), "indexer": h.page(0)}


def test_set_hit_changes_nothing_once_terminated():
    h = Harness()
    h.op.terminate(step=None)
    before = h.free_kv_slots()
    assert h.op.set_hit(1) is False
    assert h.op.progress().hash_value == ()
    assert h.free_kv_slots() == before


def test_trim_hit_only_shrinks_and_keeps_slots():
    h = Harness(pages=3)
    h.op.set_hit(3)
    before = h.free_kv_slots()
    h.op.trim_hit(5)  # longer than the hit: ignored
    assert len(h.op.progress().hash_value) == 3
    h.op.trim_hit(2)
    assert len(h.op.progress().hash_value) == 2
    assert h.free_kv_slots() == before  # slots stay owned; the commit frees them
    assert [e.value for e in h.trace.events() if e.kind is EventKind.HIT] == [3, 2]


def test_revoke_terminates_marks_done_and_frees_idle_slots_but_not_in_flight_ones():
    """F7 and F5: the in-flight page is freed by the IO that ends, not by the revoke."""
    h = Harness(pages=3)
    h.op.set_hit(3)
    start = h.op.begin_io("kv", h.page(0))
    assert not start.refused
    before = h.free_kv_slots()
    assert h.op.revoke("short_hit")
    p = h.op.progress()
    assert p.terminated and p.pool_transfers_done and h.op.revoked == "short_hit"
    assert h.op.has_in_flight()
    # Pages 1 and 2 are idle in both pools; page 0 is still held by kv's IO.
    assert h.op.drain() == 2 * PS
    assert h.free_kv_slots() == before + 2 * PS
    assert h.op.owned_slots() == {"kv": h.page(0)}
    assert h.op.revoke("again") is False
    assert h.op.begin_io("indexer", h.page(1)).refused  # F1
    assert h.op.end_io(start, "kv", h.page(0), tokens=PS) is False
    assert not h.op.has_in_flight()
    assert h.op.drain() == PS
    assert h.free_kv_slots() == before + 3 * PS
    assert h.op.progress().completed_tokens == 0  # a terminated op publishes nothing
    assert h.op.owned_slots() == {}
    assert h.violations() == []


def test_begin_io_is_refused_after_terminate():
    h = Harness()
    h.op.set_hit(2)
    h.op.terminate(step=3)
    start = h.op.begin_io("kv", h.page(0))
    assert start.refused and not h.op.has_in_flight()
    assert not [e for e in h.trace.events() if e.kind is EventKind.IO_START]
    refused = [e for e in h.trace.events() if e.kind is EventKind.IO_REFUSED]
    assert [(e.op, e.pool, list(e.slots), e.io) for e in refused] == [(h.op.request_id, "kv", h.page(0), start.io)]
    assert h.violations("S1", "S2") == []  # a refusal that moves no byte breaks nothing


def test_end_io_publishes_tokens_and_pool_pages():
    h = Harness(pages=2)
    h.op.set_hit(2)
    start = h.op.begin_io("kv", h.page(0) + h.page(1))
    assert h.op.progress().in_flight == {"kv": frozenset(h.page(0) + h.page(1))}
    assert h.op.end_io(start, "kv", h.page(0), h.page(1), tokens=PS)
    ends = [e for e in h.trace.events() if e.kind is EventKind.IO_END]
    assert [(e.value, e.slots) for e in ends] == [(True, tuple(h.page(0))), (False, tuple(h.page(1)))]
    assert all(e.io == start.io for e in ends)
    start = h.op.begin_io("indexer", h.page(0))
    assert h.op.end_io(start, "indexer", h.page(0), pages=1)
    p = h.op.progress()
    assert p.completed_tokens == PS and p.in_flight == {}
    assert p.pool_progress == (PoolProgress("indexer", HitPolicy.ALL_PAGES, 1),)


def test_terminate_snapshot_is_taken_atomically_with_the_mark():
    """F2: IO that ends after terminate changes neither the snapshot nor the progress."""
    h = Harness(pages=2)
    h.op.set_hit(2)
    started, proceed, ended = threading.Event(), threading.Event(), threading.Event()
    result: dict[str, object] = {}

    def io_thread() -> None:
        start = h.op.begin_io("kv", h.page(0) + h.page(1))
        started.set()
        if not proceed.wait(WAIT_S):
            result["error"] = "scheduler never let the IO end"
            return
        result["live"] = h.op.end_io(start, "kv", h.page(0) + h.page(1), tokens=2 * PS)
        ended.set()

    thread = threading.Thread(target=io_thread, name="test-io")
    thread.start()
    assert started.wait(WAIT_S), "IO thread did not begin its IO"
    snapshot = h.op.terminate(step=7)
    proceed.set()
    assert ended.wait(WAIT_S), "IO thread did not end its IO"
    thread.join(WAIT_S)
    assert "error" not in result
    assert snapshot.terminated and snapshot.completed_tokens == 0
    assert snapshot.in_flight == {"kv": frozenset(h.page(0) + h.page(1))}
    assert result["live"] is False
    assert h.op.progress().completed_tokens == 0
    terminate = next(e for e in h.trace.events() if e.kind is EventKind.TERMINATE)
    assert terminate.step == 7 and terminate.value == 0
    # The IO thread released its own slots (kv); indexer slots are still the op's.
    assert h.op.owned_slots() == {"indexer": h.page(0) + h.page(1)}
    h.op.release_idle()
    h.op.drain()
    assert h.free_kv_slots() == h.allocators["kv"].capacity_slots
    assert h.violations() == []


def test_take_for_insert_refuses_a_slot_with_io_in_flight():
    h = Harness(pages=2)
    h.op.set_hit(2)
    h.op.begin_io("kv", h.page(1))
    h.op.terminate(step=1)
    with pytest.raises(FenceError, match=f"slot {h.page(1)[0]} of pool kv"):
        h.op.take_for_insert("kv", h.page(1))


def test_inserted_slots_leave_the_operation_and_are_never_freed_by_it():
    h = Harness(pages=2)
    h.op.set_hit(2)
    h.op.terminate(step=1)
    for pool in ("kv", "indexer"):
        h.op.take_for_insert(pool, h.page(0))
    before = h.free_kv_slots()
    h.op.release_idle()
    h.op.drain()
    assert h.free_kv_slots() == before + PS  # only page 1
    assert h.frees("kv") == h.page(1)
    h.op.release("kv", h.page(0))  # inserted: no longer the op's to release
    assert h.op.drain() == 0


def test_shared_slot_numbers_go_back_when_the_last_pool_lets_go():
    h = Harness(pages=1)
    before = h.free_kv_slots()
    h.op.release("kv", h.page(0))
    assert h.op.drain() == 0  # the indexer still holds these numbers
    h.op.release("kv", h.page(0))  # a second release of the same pool is a no-op
    h.op.release("indexer", h.page(0))
    assert h.op.drain() == PS
    assert h.free_kv_slots() == before + PS
    assert sorted(h.frees("kv")) == sorted(h.frees("indexer")) == h.page(0)
    assert h.op.owned_slots() == {}


def test_state_slot_is_kept_by_set_hit_and_freed_by_release_idle():
    h = Harness(pages=2, mamba=True)
    states_free = h.allocators["state"].free_slots()
    h.op.set_hit(1)
    assert h.op.owned_slots()["mamba"] == h.state_slot.tolist()
    h.op.terminate(step=1)
    h.op.release_idle()
    assert h.op.drain() == 1 + 2 * PS  # the state slot and both kv pages
    assert h.allocators["state"].free_slots() == states_free + 1
    assert h.violations() == []


def test_finish_transfers_sets_done_and_the_event():
    h = Harness()
    h.op.finish_transfers()
    assert h.op.io_done.is_set() and h.op.progress().pool_transfers_done
    assert [e.kind for e in h.trace.events()][-1] is EventKind.IO_DONE


@pytest.mark.parametrize("terminate_after_batches", [0, 1, 2, 3])
def test_terminate_at_any_batch_boundary_frees_every_slot_exactly_once(terminate_after_batches):
    """An IO thread loads page by page; the scheduler terminates after a given batch."""
    pages = 3
    h = Harness(pages=pages)
    h.op.set_hit(pages)
    batch_started = [threading.Event() for _ in range(pages)]
    may_end = [threading.Event() for _ in range(pages)]
    finished = threading.Event()
    errors: list[str] = []

    def io_thread() -> None:
        for index in range(pages):
            start = h.op.begin_io("kv", h.page(index))
            if start.refused:
                break
            batch_started[index].set()
            if not may_end[index].wait(WAIT_S):
                errors.append(f"batch {index} never released")
                return
            if not h.op.end_io(start, "kv", h.page(index), tokens=PS):
                break
        h.op.finish_transfers()
        finished.set()

    thread = threading.Thread(target=io_thread, name="test-io")
    thread.start()
    for index in range(terminate_after_batches):
        assert batch_started[index].wait(WAIT_S), f"batch {index} did not start"
        may_end[index].set()
    if terminate_after_batches < pages:
        assert batch_started[terminate_after_batches].wait(WAIT_S)
    else:
        assert finished.wait(WAIT_S)
    snapshot = h.op.terminate(step=1)
    for event in may_end:
        event.set()
    assert finished.wait(WAIT_S), "IO thread did not finish"
    thread.join(WAIT_S)
    assert not errors
    done_pages = snapshot.completed_tokens // PS
    # The batch in flight at terminate did not count (F2) ...
    assert done_pages == min(terminate_after_batches, pages)
    inserted = [s for i in range(done_pages) for s in h.page(i)]
    for pool in ("kv", "indexer"):
        h.op.take_for_insert(pool, inserted)
        h.trace.record(EventKind.INSERT, op="r1", pool=pool, space=HOST, slots=inserted)
    h.op.release_idle()
    assert not h.op.has_in_flight()
    h.op.drain()
    # ... and every slot not inserted is back in the allocator exactly once.
    assert h.free_kv_slots() == h.allocators["kv"].capacity_slots - done_pages * PS
    assert h.op.owned_slots() == {}
    # Only kv was loaded here, so F3 (a completed load before insert) does not apply.
    assert h.violations("S1", "S2", "S3") == []


def test_fail_in_flight_ends_every_open_io_and_frees_after_terminate():
    h = Harness()
    start = h.op.begin_io("kv", h.page(0) + h.page(1))
    assert not start.refused and h.op.has_in_flight()
    h.op.revoke("error")
    h.op.fail_in_flight()
    assert not h.op.has_in_flight()
    ends = [e for e in h.trace.events() if e.kind.value == "io_end"]
    assert len(ends) == 1 and ends[0].io == start.io and ends[0].value is False
    h.op.drain()
    assert h.op.owned_slots() == {}
    assert h.free_kv_slots() == 8 * PS  # kv and indexer both let go: every slot number returned
    assert h.violations() == []


# --- L4: a transfer past its bound counts as failed ------------------------------------------


def test_expiry_waits_for_the_bound_then_counts_a_running_kv_batch_failed():
    h = Harness(pages=3)
    h.op.set_hit(3)
    first = h.op.begin_io("kv", h.page(0))
    assert h.op.end_io(first, "kv", h.page(0), tokens=PS)
    second = h.op.begin_io("kv", h.page(1))  # started at t=10.0 on the trace's clock
    assert h.op.expire_io(15.0, 5.0) == []  # exactly at the bound: not past it
    (expired,) = h.op.expire_io(15.5, 5.0)
    assert expired.io == second.io
    p = h.op.progress()
    assert p.hash_value == tuple(h.op.requested_hashes[:1]) and p.completed_tokens == PS  # the hit is what arrived
    assert p.pool_transfers_done and not p.terminated  # the indexer counts as done, with its 0 pages
    assert h.op.has_in_flight(), "an expired transfer still runs: its slots stay excluded (F5)"
    assert h.op.begin_io("indexer", h.page(0)).refused, "nothing starts after a transfer failed"
    assert h.op.expire_io(20.0, 5.0) == []  # counted once
    # It returns late, with good bytes: too late to count.
    assert not h.op.end_io(second, "kv", h.page(1), tokens=PS)
    assert h.op.progress().completed_tokens == PS and not h.op.has_in_flight()
    kinds = [e.kind for e in h.trace.events() if e.op == "r1"]
    assert EventKind.IO_EXPIRED in kinds and kinds.index(EventKind.IO_EXPIRED) < max(i for i, k in enumerate(kinds) if k is EventKind.IO_END)


def test_expiry_with_nothing_loaded_revokes_and_frees_the_hung_slots_only_when_the_io_returns():
    h = Harness(pages=2)
    h.op.set_hit(2)
    hung = h.op.begin_io("kv", h.page(0) + h.page(1))
    h.op.expire_io(100.0, 5.0)
    p = h.op.progress()
    assert p.terminated and p.pool_transfers_done and h.op.revoked == "io_timeout"
    h.op.drain()
    assert h.frees("kv") == [] and h.free_kv_slots() == 8 * PS - 2 * PS, "slots of a running transfer were freed"
    assert not h.op.end_io(hung, "kv", (), h.page(0) + h.page(1))
    h.op.drain()
    assert sorted(h.frees("kv")) == sorted(h.page(0) + h.page(1)) and h.free_kv_slots() == 8 * PS
    assert h.violations() == []


# --- the lock discipline, as the suite judges it (spec/fence_lock.py) ---------------------------

def _one_full_life(op: PrefetchOperation, h: "Harness") -> None:
    """Every fenced section once: hit, a batch begun and ended, a trim, terminate, insert, release, drain."""
    op.set_hit(3)
    started = op.begin_io("kv", h.page(0) + h.page(1))
    op.end_io(started, "kv", h.page(0), h.page(1), tokens=PS)
    op.trim_hit(1)
    op.finish_transfers()
    op.progress()
    op.terminate(1)
    op.take_for_insert("kv", h.page(0))
    op.take_for_insert("indexer", h.page(0))
    op.release_idle()
    op.drain()


def test_every_fenced_section_runs_under_the_operations_lock():
    h = Harness()
    _one_full_life(h.op, h)
    assert h.trace.unfenced() == ()
    assert check(h.trace.trace(), clauses=["fence_lock"]) == []


def test_an_operation_whose_lock_cannot_tell_its_owner_is_reported_at_every_section():
    h = Harness()
    h.op.lock = threading.Lock()  # what a dropped `with self.lock:` looks like to the recorder
    _one_full_life(h.op, h)
    sections = [entered.section for entered in h.trace.unfenced()]
    assert {"set_hit", "begin_io", "end_io", "trim_hit", "finish_transfers", "snapshot", "terminate",
            "take_for_insert", "release", "drain"} <= set(sections)
    clauses = {v.clause for v in check(h.trace.trace(), clauses=["fence_lock"])}
    assert clauses == {"F1", "F2", "F5", "S1", "S3"}
