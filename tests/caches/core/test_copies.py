"""CopyTracker: host<->device copies on the real CPU copy stream, and frees deferred past them (F9).

The "device" tier is a CPU buffer here (as on a CPU-only cache); copies run
on the engine's copy-stream thread, held and failed with the conformance Gate.
"""

from __future__ import annotations

import pytest
import torch

from conformance.bounds import WAIT_S
from caches.core.allocator import PageAllocator
from caches.core.copies import CopyTracker
from caches.core.copy_engine import CopyEngine, CopyTimeout
from caches.core.pools import PoolBuffer, PoolSpec
from conformance.gates import Gate
from spec import check
from spec.clock import ManualClock
from spec.trace import DEVICE, HOST, LOAD_BACK_COPY, WRITE_BACK_COPY, EventKind, TraceRecorder

PS = 4
PAGES = 8


def slots(first_page: int, pages: int = 1) -> torch.Tensor:
    return torch.arange(first_page * PS, (first_page + pages) * PS, dtype=torch.int64)


class Rig:
    def __init__(self, wait_timeout_s: float = WAIT_S) -> None:
        self.trace = TraceRecorder(ManualClock(0.0))
        self.gate = Gate(self.trace, timeout_s=WAIT_S)
        self.spec = PoolSpec.kv((2, 3), torch.float32)
        self.host = PoolBuffer(self.spec, PAGES * PS, "cpu")
        self.device = PoolBuffer(self.spec, PAGES * PS, "cpu")
        g = torch.Generator().manual_seed(0)
        self.host.tensor.copy_(torch.randn(self.host.tensor.shape, generator=g))
        self.device.tensor.copy_(torch.randn(self.device.tensor.shape, generator=g))
        self.allocators = {(space, "kv"): PageAllocator(PAGES, PS, name=f"{space} kv") for space in (HOST, DEVICE)}
        for allocator in self.allocators.values():
            allocator.alloc(PAGES * PS)  # every slot starts allocated: frees are counted
        self.engine = CopyEngine("cpu", cpu_stream=True)
        self.tracker = CopyTracker(self.engine, self.trace, self.free, wait_timeout_s, units={"kv": PS})
        self.done_calls: list[bool] = []

    def free(self, space: str, group: str, freed: list[int]) -> None:
        self.allocators[(space, group)].free(freed)

    def freed(self, space: str) -> int:
        return self.allocators[(space, "kv")].free_slots()

    def load_back(self, host_page: int, device_page: int):
        return self.tracker.copy(pool="kv", group="kv", direction=LOAD_BACK_COPY, dst=self.device, dst_slots=slots(device_page),
                                 src=self.host, src_slots=slots(host_page), on_done=self.done_calls.append)

    def write_back(self, device_page: int, host_page: int):
        return self.tracker.copy(pool="kv", group="kv", direction=WRITE_BACK_COPY, dst=self.host, dst_slots=slots(host_page),
                                 src=self.device, src_slots=slots(device_page), on_done=self.done_calls.append)

    def hold_copy(self, description: str = "copy"):
        return self.gate.hold(description, lambda e: e.kind is EventKind.IO_START and e.space == HOST)

    def events(self, kind: EventKind) -> list:
        return [e for e in self.trace.events() if e.kind is kind]


@pytest.fixture
def rig():
    r = Rig()
    yield r
    r.gate.close()
    r.engine.close(WAIT_S)
    assert not any(t.is_alive() for t in r.engine.threads), "copy stream thread still running"


def test_a_load_back_copy_moves_the_bytes_and_records_both_sides(rig):
    want = rig.host.read(slots(2)).clone()
    record = rig.load_back(host_page=2, device_page=5)
    rig.tracker.wait()
    assert torch.equal(rig.device.read(slots(5)), want)
    starts, ends = rig.events(EventKind.IO_START), rig.events(EventKind.IO_END)
    assert [(e.space, e.slots, e.value) for e in starts] == [
        (HOST, tuple(slots(2).tolist()), LOAD_BACK_COPY),
        (DEVICE, tuple(slots(5).tolist()), LOAD_BACK_COPY),
    ]
    assert {e.io for e in starts} == {e.io for e in ends} == {record.io}
    assert [e.value for e in ends] == [True, True]
    assert record.ok is True and rig.done_calls == [True]
    assert rig.tracker.pending_count() == 0


def test_a_free_of_a_copy_destination_waits_for_the_copy(rig):
    """F9: the device slots a held copy writes are freed only after it ends."""
    hold = rig.hold_copy()
    record = rig.load_back(host_page=1, device_page=3)
    hold.wait_reached()
    before = rig.freed(DEVICE)
    rig.tracker.free(DEVICE, "kv", slots(3).tolist(), pools=["kv"])
    rig.tracker.poll()
    assert rig.freed(DEVICE) == before and rig.events(EventKind.FREE) == []
    assert not record.handle.done() and rig.tracker.pending_count() == 2  # one copy, one deferred free
    hold.release()
    rig.tracker.wait()
    assert rig.freed(DEVICE) == before + PS
    kinds = [e.kind for e in rig.trace.events()]
    assert kinds.index(EventKind.FREE) > max(i for i, k in enumerate(kinds) if k is EventKind.IO_END)
    assert check(rig.trace.trace(), None, clauses=["S3"]) == []


def test_a_free_of_a_copy_source_waits_for_the_copy(rig):
    hold = rig.hold_copy()
    rig.load_back(host_page=4, device_page=0)
    hold.wait_reached()
    before = rig.freed(HOST)
    rig.tracker.free(HOST, "kv", slots(4).tolist(), pools=["kv"])
    assert rig.freed(HOST) == before
    hold.release()
    rig.tracker.wait()
    assert rig.freed(HOST) == before + PS
    assert check(rig.trace.trace(), None, clauses=["S3"]) == []


def test_slots_no_copy_touches_are_freed_at_once_even_while_another_copy_is_held(rig):
    hold = rig.hold_copy()
    rig.load_back(host_page=0, device_page=0)
    hold.wait_reached()
    before = rig.freed(DEVICE)
    rig.tracker.free(DEVICE, "kv", slots(6).tolist(), pools=["kv", "indexer"])
    assert rig.freed(DEVICE) == before + PS
    # One FREE per pool living in these slot numbers.
    assert [e.pool for e in rig.events(EventKind.FREE)] == ["kv", "indexer"]
    hold.release()
    rig.tracker.wait()


def test_a_free_waits_for_every_copy_touching_the_slots(rig):
    hold = rig.gate.hold("first copy", lambda e: e.kind is EventKind.IO_START and e.space == HOST, times=1)
    rig.load_back(host_page=2, device_page=1)
    rig.load_back(host_page=2, device_page=2)  # queued behind the held one
    hold.wait_reached()
    before = rig.freed(HOST)
    rig.tracker.free(HOST, "kv", slots(2).tolist(), pools=["kv"])
    hold.release()
    rig.tracker.wait()
    assert rig.freed(HOST) == before + PS
    assert rig.done_calls == [True, True]
    assert check(rig.trace.trace(), None, clauses=["S3"]) == []


def test_a_failed_copy_reports_false_and_writes_nothing(rig):
    before = rig.device.read(slots(7)).clone()
    rig.gate.fail("copy error", lambda e: e.kind is EventKind.IO_START and e.space == HOST)
    record = rig.load_back(host_page=0, device_page=7)
    rig.tracker.wait()
    assert record.ok is False and rig.done_calls == [False]
    assert [e.value for e in rig.events(EventKind.IO_END)] == [False, False]
    assert torch.equal(rig.device.read(slots(7)), before)


def test_wait_is_bounded_and_names_the_held_copy():
    rig = Rig(wait_timeout_s=0.2)
    try:
        hold = rig.hold_copy()
        rig.load_back(host_page=0, device_page=1)
        hold.wait_reached()
        with pytest.raises(CopyTimeout, match="did not complete within 0.2"):
            rig.tracker.wait()
        hold.release()
        rig.tracker.wait()
        assert rig.done_calls == [True]
    finally:
        rig.gate.close()
        rig.engine.close(WAIT_S)


def test_a_write_back_copy_records_its_host_slots_as_host(rig):
    rig.write_back(device_page=1, host_page=6)
    rig.tracker.wait()
    starts = {e.space: e.slots for e in rig.events(EventKind.IO_START)}
    assert starts == {HOST: tuple(slots(6).tolist()), DEVICE: tuple(slots(1).tolist())}


def test_a_free_of_a_write_back_destination_waits_for_the_copy(rig):
    hold = rig.hold_copy()
    rig.write_back(device_page=1, host_page=6)
    hold.wait_reached()
    before = rig.freed(HOST)
    try:
        rig.tracker.free(HOST, "kv", slots(6).tolist(), pools=["kv"])
        assert rig.freed(HOST) == before, "host slots freed while a device->host copy into them is held"
    finally:
        hold.release()
        rig.tracker.wait()
