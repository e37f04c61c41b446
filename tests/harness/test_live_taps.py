"""The trace taps of conformance/live/taps/ on hand-written upstream-shaped objects.

The objects have upstream's method names and call shapes (a host pool with
alloc/free, a controller whose IO thread calls page_get_func per batch and
increments the operation per page), not its code.
"""

from __future__ import annotations

import queue
import threading

import pytest
import torch

from conformance.bounds import WAIT_S
from conformance.gates import Gate, InjectedFault
from conformance.live.taps import Taps
from conformance.live.taps.controller import tap_fork_controller, tap_load_path
from conformance.live.taps.host import tap_host_pool
from spec.clock import ManualClock
from spec.config import TerminationConfig
from spec.trace import LOAD, EventKind, TraceRecorder

PS = 4


class HostPool:
    def __init__(self, size: int) -> None:
        self.free_slots = torch.arange(size)

    def alloc(self, need: int):
        if need > len(self.free_slots):
            return None
        out, self.free_slots = self.free_slots[:need], self.free_slots[need:]
        return out

    def free(self, indices) -> int:
        self.free_slots = torch.cat([self.free_slots, indices])
        return len(indices)


class Operation:
    def __init__(self, request_id: str, pages: int) -> None:
        self.request_id = request_id
        self.hash_value = [f"h{i}" for i in range(pages)]
        self.completed_tokens = 0
        self._terminated = False
        self.start_time = 0.0
        self.token_ids = [0] * (pages * PS)

    def increment(self, tokens: int) -> bool:
        if self._terminated:
            return False
        self.completed_tokens += tokens
        return True


class Controller:
    """Upstream's shape: _page_transfer calls page_get_func per batch; the IO thread releases the tail after it."""

    def __init__(self, pages_that_arrive: int) -> None:
        self.arrive = pages_that_arrive
        self.released = []

    def page_get_func(self, operation, hash_values, host_indices, extra_info=None):
        for _ in hash_values:
            if operation.completed_tokens // PS >= self.arrive:
                break
            operation.increment(PS)

    def _page_transfer(self, operation):
        for i in range(0, len(operation.hash_value), 2):
            before = operation.completed_tokens
            self.page_get_func(operation, operation.hash_value[i : i + 2], torch.arange(i * PS, (i + 2) * PS))
            if operation.completed_tokens != before + 2 * PS:
                break

    def append_host_mem_release(self, indices):
        self.released.append(indices)

    def io_thread(self, operation):
        self._page_transfer(operation)
        self.append_host_mem_release(torch.arange(operation.completed_tokens, len(operation.hash_value) * PS))


def make_taps() -> tuple[Taps, TraceRecorder]:
    trace = TraceRecorder(ManualClock(0.0))
    return Taps(trace, TerminationConfig(policy="wait_complete", page_size=PS), PS), trace


def test_host_slots_are_owned_by_the_operation_in_prefetch_context_else_the_tree():
    taps, trace = make_taps()
    pool = HostPool(16)
    tap_host_pool(taps, pool)
    tree_slots = pool.alloc(4)
    with taps.scheduling(op="r1", phase="prefetch"):
        op_slots = pool.alloc(8)
    pool.free(torch.cat([op_slots[:4], tree_slots]))
    allocs = [(e.op, e.slots) for e in trace.events() if e.kind is EventKind.ALLOC]
    frees = sorted(((e.op or "tree"), e.slots) for e in trace.events() if e.kind is EventKind.FREE)
    assert allocs == [(None, (0, 1, 2, 3)), ("r1", (4, 5, 6, 7, 8, 9, 10, 11))]
    assert frees == [("r1", (4, 5, 6, 7)), ("tree", (0, 1, 2, 3))]


def test_a_batch_that_arrives_in_part_ends_in_two_parts_and_io_done_follows_the_tail_release():
    taps, trace = make_taps()
    cc = Controller(pages_that_arrive=3)
    tap_load_path(taps, cc)
    cc.io_thread(Operation("r1", pages=4))
    ends = [(e.slots, e.value) for e in trace.events() if e.kind is EventKind.IO_END]
    assert ends == [(tuple(range(0, 8)), True), (tuple(range(8, 12)), True), (tuple(range(12, 16)), False)]
    kinds = [e.kind for e in trace.events()]
    assert kinds[0] is EventKind.HIT and kinds[-1] is EventKind.IO_DONE
    assert taps.wait_io_done("r1", 0)


def test_a_gate_fault_fails_the_batch_and_ends_the_io_thread_like_a_storage_error():
    taps, trace = make_taps()
    cc = Controller(pages_that_arrive=4)
    tap_load_path(taps, cc)
    gate = Gate(trace)
    gate.fail("storage raises", lambda e: e.kind is EventKind.IO_START and e.value == LOAD)
    with pytest.raises(InjectedFault):
        cc.io_thread(Operation("r1", pages=4))
    assert [(e.kind, e.value) for e in trace.events() if e.kind in (EventKind.IO_END, EventKind.IO_DONE)] == [(EventKind.IO_END, False), (EventKind.IO_DONE, None)]
    assert cc.released == [], "upstream's IO thread dies before releasing the tail: the harness sees the leak"
    assert "InjectedFault" in taps.io_thread_errors[0]


def test_a_hold_parks_the_io_thread_before_the_storage_call():
    taps, trace = make_taps()
    cc = Controller(pages_that_arrive=4)
    tap_load_path(taps, cc)
    gate = Gate(trace, timeout_s=WAIT_S)
    held = gate.hold("second batch", lambda e: e.kind is EventKind.IO_START and e.slots[0] == 2 * PS)
    operation = Operation("r1", pages=4)
    worker = threading.Thread(target=cc.io_thread, args=(operation,), daemon=True)
    worker.start()
    held.wait_reached()
    assert operation.completed_tokens == 2 * PS, "the held batch must not have read anything yet"
    held.release()
    worker.join(WAIT_S)
    assert not worker.is_alive() and operation.completed_tokens == 4 * PS
    gate.close()


class FullController(Controller):
    """Adds the rest of upstream's controller surface that tap_controller wraps."""

    def __init__(self, pages_that_arrive: int) -> None:
        super().__init__(pages_that_arrive)
        self.prefetch_queue = queue.Queue()
        self.prefetch_revoke_queue = queue.Queue()
        self.write_queue: list = []
        self.load_queue: list = []

    def page_set_func(self, hash_values, host_indices, extra_info=None) -> bool:
        return True

    def terminate_prefetch(self, operation):
        operation._terminated = True
        return operation.completed_tokens, operation.hash_value

    def start_writing(self) -> None:
        self.write_queue.clear()

    def start_loading(self) -> int:
        self.load_queue.clear()
        return 0


def test_waiting_for_io_returns_at_once_for_a_request_never_queued_and_after_io_done_otherwise():
    taps, trace = make_taps()
    cc = FullController(pages_that_arrive=4)
    tap_fork_controller(taps, cc)
    assert taps.wait_io_done("never-queued", 0)
    operation = Operation("r1", pages=4)
    cc.prefetch_queue.put(operation)
    assert not taps.wait_io_done("r1", 0), "queued, its IO not yet ended"
    worker = threading.Thread(target=cc.io_thread, args=(cc.prefetch_queue.get(),), daemon=True)
    worker.start()
    assert taps.wait_io_done("r1", WAIT_S)
    worker.join(WAIT_S)
    assert [e.kind for e in trace.events()][:2] == [EventKind.OP_START, EventKind.HIT]


def test_terminate_in_a_check_carries_its_step_and_an_abort_is_a_revoke():
    taps, trace = make_taps()
    cc = FullController(pages_that_arrive=4)
    tap_fork_controller(taps, cc)
    with taps.scheduler_step() as step:
        cc.terminate_prefetch(Operation("r1", pages=2))
    with taps.scheduling(op="r2", phase="abort"):
        cc.terminate_prefetch(Operation("r2", pages=2))
    got = [(e.kind, e.op, e.step) for e in trace.events() if e.kind in (EventKind.TERMINATE, EventKind.REVOKE, EventKind.COMMIT)]
    assert got == [(EventKind.TERMINATE, "r1", step), (EventKind.REVOKE, "r2", None), (EventKind.COMMIT, "r2", None)]


def test_a_revoked_prefetch_ends_its_io_when_the_prefetch_thread_released_its_slots():
    """Upstream's prefetch thread queues the revoke, then releases the slots: waiting for the IO covers both."""
    taps, trace = make_taps()
    cc = FullController(pages_that_arrive=4)
    tap_fork_controller(taps, cc)
    operation = Operation("r1", pages=2)
    cc.prefetch_queue.put(operation)
    cc.prefetch_revoke_queue.put("r1")
    assert not taps.wait_io_done("r1", 0), "the slots are not released yet: a check now would find nothing to free"
    cc.append_host_mem_release(torch.arange(2 * PS))
    assert taps.wait_io_done("r1", 0)
    kinds = [e.kind for e in trace.events() if e.op == "r1"]
    assert kinds == [EventKind.OP_START, EventKind.REVOKE, EventKind.IO_DONE]
