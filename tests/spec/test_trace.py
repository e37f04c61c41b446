import threading

import pytest

from spec import ConfigError, EventKind, ManualClock, NullRecorder, TraceRecorder


def test_events_are_ordered_and_stamped_by_the_injected_clock():
    clock = ManualClock(10.0)
    rec = TraceRecorder(clock, rank=3)
    a = rec.record(EventKind.STEP, step=1)
    clock.advance(0.25)
    b = rec.record("alloc", op="r1", pool="kv", space="host", slots=[4, 5])
    assert (a.seq, b.seq) == (0, 1)
    assert (a.t, b.t) == (10.0, 10.25)
    assert b.rank == 3 and b.kind is EventKind.ALLOC and b.slots == (4, 5)
    assert rec.trace().events == (a, b)


def test_tensor_slots_become_ints():
    torch = pytest.importorskip("torch")
    rec = TraceRecorder(ManualClock())
    event = rec.record(EventKind.FREE, pool="kv", space="device", slots=torch.arange(3))
    assert event.slots == (0, 1, 2) and all(type(s) is int for s in event.slots)


def test_bad_fields_rejected():
    rec = TraceRecorder(ManualClock())
    with pytest.raises(ConfigError, match="invalid space: 'gpu'"):
        rec.record(EventKind.FREE, pool="kv", space="gpu", slots=[1])
    with pytest.raises(ValueError):
        rec.record("teleport")
    with pytest.raises(ConfigError):
        TraceRecorder(ManualClock(), rank=-1)


def test_gate_runs_outside_the_recorder_and_can_block():
    rec = TraceRecorder(ManualClock())
    release = threading.Event()
    seen = []

    def gate(event):
        seen.append(event.kind)
        assert release.wait(5), "gate was never released"

    rec.set_gate(gate)
    event = rec.record(EventKind.IO_START, op="r1", pool="kv", space="host", slots=[0], io=rec.next_io_id(), value="storage_to_host")
    worker = threading.Thread(target=rec.gate, args=(event,))
    worker.start()
    # While the gated thread is held, other threads still record.
    rec.record(EventKind.STEP, step=1)
    release.set()
    worker.join(5)
    assert not worker.is_alive()
    assert seen == [EventKind.IO_START] and len(rec.events()) == 2


def test_concurrent_recording_keeps_a_dense_sequence():
    rec = TraceRecorder(ManualClock())

    def work():
        for _ in range(500):
            rec.record(EventKind.STEP, step=0)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert [e.seq for e in rec.events()] == list(range(2000))


def test_null_recorder_records_nothing():
    rec = NullRecorder()
    rec.record(EventKind.STEP, step=1)
    assert rec.events() == ()
