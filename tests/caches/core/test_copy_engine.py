"""CopyEngine: CPU path (always), CUDA path (gpu marker), bounded waits."""

import itertools

import pytest
import torch

from caches.core.copy_engine import CopyEngine, CopyEngineError, CopyHandle, CopyTimeout
from caches.core.pools import PoolBuffer, PoolSlotError, PoolSpec
from conformance.implementations import devices
from conformance.scenarios.workload import random_rows

needs_cuda = devices.needs_gpu


def slots(values):
    return torch.tensor(values, dtype=torch.int64)


def filled(spec, num_slots, device, seed):
    """A buffer whose slots hold random bytes (any dtype, bfloat16 included)."""
    buf = PoolBuffer(spec, num_slots, device)
    buf.tensor.copy_(random_rows(num_slots, spec.elem_shape, spec.dtype, seed).to(device))
    return buf


def slot_bytes(buf, slot):
    return bytes(buf.tensor[slot].cpu().contiguous().reshape(-1).view(torch.uint8).tolist())


# Pages of 4 slots in scattered order, plus a lone slot: runs of several lengths.
SRC = [8, 9, 10, 11, 0, 1, 2, 3, 13]
DST = [4, 5, 6, 7, 12, 13, 14, 15, 0]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.int8], ids=str)
def test_cpu_copy_is_byte_exact_and_complete(dtype):
    spec = PoolSpec.kv((2, 3), dtype)
    src = filled(spec, 16, "cpu", seed=1)
    dst = PoolBuffer(spec, 16, "cpu")
    engine = CopyEngine("cpu")
    handle = engine.copy_slots(dst, slots(DST), src, slots(SRC))
    assert handle.done()
    handle.wait(timeout_s=1.0)
    for s, d in zip(SRC, DST):
        assert slot_bytes(dst, d) == slot_bytes(src, s)
    untouched = sorted(set(range(16)) - set(DST))
    assert all(slot_bytes(dst, d) == bytes(len(slot_bytes(dst, d))) for d in untouched)


def test_cpu_copy_within_one_buffer_with_overlap():
    spec = PoolSpec.mamba((4,), torch.float32)
    buf = filled(spec, 8, "cpu", seed=2)
    before = [slot_bytes(buf, s) for s in range(8)]
    CopyEngine(torch.device("cpu")).copy_slots(buf, slots([1, 2, 3]), buf, slots([0, 1, 2]))
    assert [slot_bytes(buf, s) for s in (1, 2, 3)] == before[0:3]


def test_empty_copy_is_complete():
    spec = PoolSpec.kv((2,), torch.float32)
    a, b = PoolBuffer(spec, 4, "cpu"), PoolBuffer(spec, 4, "cpu")
    empty = torch.empty(0, dtype=torch.int64)
    assert CopyEngine("cpu").copy_slots(a, empty, b, empty).done()


def test_copy_request_validation():
    engine = CopyEngine("cpu")
    kv = PoolSpec.kv((2,), torch.float32)
    a, b = PoolBuffer(kv, 4, "cpu"), PoolBuffer(kv, 4, "cpu")
    other = PoolBuffer(PoolSpec.kv((3,), torch.float32), 4, "cpu")
    with pytest.raises(CopyEngineError, match="differ in length"):
        engine.copy_slots(a, slots([0, 1]), b, slots([0]))
    with pytest.raises(CopyEngineError, match="same pool on both sides"):
        engine.copy_slots(a, slots([0]), other, slots([0]))
    with pytest.raises(PoolSlotError, match="src_slots for pool 'kv' contains slot 4"):
        engine.copy_slots(a, slots([0]), b, slots([4]))
    with pytest.raises(CopyEngineError, match="expected a PoolBuffer"):
        engine.copy_slots(a.tensor, slots([0]), b, slots([0]))
    on_meta = PoolBuffer.device(kv, 4, "meta")
    with pytest.raises(CopyEngineError, match="lives on 'meta'"):
        engine.copy_slots(on_meta, slots([0]), b, slots([0]))


def test_unsupported_device_type_is_rejected():
    with pytest.raises(CopyEngineError, match="accepted device types are cpu, cuda"):
        CopyEngine("meta")


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is visible")
def test_cuda_engine_without_cuda_is_a_clear_error():
    with pytest.raises(CopyEngineError, match="device='cuda' is unavailable"):
        CopyEngine("cuda")


def test_wait_is_bounded_and_names_the_copy():
    ticks = itertools.count()
    clock = lambda: next(ticks) * 0.25  # noqa: E731 - each reading advances time
    handle = CopyHandle("kv host->device #7", lambda: False, clock=clock)
    assert not handle.done()
    with pytest.raises(CopyTimeout, match=r"copy 'kv host->device #7' did not complete within 1.0 s"):
        handle.wait(timeout_s=1.0)


def test_wait_returns_when_the_copy_completes():
    polls = itertools.count()
    handle = CopyHandle("late", lambda: next(polls) >= 3, keepalive=[torch.ones(1)])
    handle.wait(timeout_s=5.0)
    assert handle.done() and handle._keepalive == []


@pytest.mark.parametrize("timeout", [0, -1, float("inf"), float("nan"), "1", True])
def test_wait_timeout_validation(timeout):
    with pytest.raises(CopyEngineError, match="timeout_s=.* is invalid"):
        CopyHandle("x").wait(timeout_s=timeout)


# -- CUDA -----------------------------------------------------------------------


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("direction", ["h2d", "d2h", "d2d"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_cuda_copies_are_byte_exact(direction, dtype):
    spec = PoolSpec.kv((2, 3), dtype)
    engine = CopyEngine("cuda")
    assert engine.device.index is not None and engine.stream is not None
    src_device = "cpu" if direction == "h2d" else engine.device
    dst_device = "cpu" if direction == "d2h" else engine.device
    src = filled(spec, 16, src_device, seed=3)
    if src.is_host:
        src = _pinned_copy(src, engine.device)
    dst = (
        PoolBuffer.host(spec, 16, for_device=engine.device)
        if dst_device == "cpu" else PoolBuffer.device(spec, 16, engine.device)
    )
    handle = engine.copy_slots(dst, slots(DST), src, slots(SRC))
    assert handle.event is not None
    handle.wait(timeout_s=30.0)
    assert handle.done()
    for s, d in zip(SRC, DST):
        assert slot_bytes(dst, d) == slot_bytes(src, s)


def _pinned_copy(buf, device):
    pinned = PoolBuffer.host(buf.spec, buf.num_slots, for_device=device)
    pinned.tensor.copy_(buf.tensor)
    assert pinned.tensor.is_pinned()
    return pinned


@pytest.mark.gpu
@needs_cuda
def test_cuda_wait_times_out_while_the_stream_is_busy():
    engine = CopyEngine("cuda")
    spec = PoolSpec.kv((4,), torch.float32)
    host = _pinned_copy(filled(spec, 8, "cpu", seed=4), engine.device)
    dev = PoolBuffer.device(spec, 8, engine.device)
    with torch.cuda.stream(engine.stream):
        torch.cuda._sleep(2_000_000_000)  # keep the copy stream busy for about a second
    handle = engine.copy_slots(dev, slots([0, 1]), host, slots([2, 3]), label="held copy")
    assert not handle.done()
    with pytest.raises(CopyTimeout, match="copy 'held copy' did not complete within 0.01 s"):
        handle.wait(timeout_s=0.01)
    handle.wait(timeout_s=60.0)
    assert slot_bytes(dev, 0) == slot_bytes(host, 2)


@pytest.mark.gpu
@needs_cuda
def test_cuda_consumer_stream_waits_on_the_copy_event():
    engine = CopyEngine("cuda")
    spec = PoolSpec.kv((1024,), torch.float32)
    host = _pinned_copy(filled(spec, 64, "cpu", seed=5), engine.device)
    dev = PoolBuffer.device(spec, 64, engine.device)
    with torch.cuda.stream(engine.stream):
        torch.cuda._sleep(200_000_000)
    handle = engine.copy_slots(dev, slots(list(range(64))), host, slots(list(range(64))))
    consumer = torch.cuda.Stream(device=engine.device)
    handle.make_stream_wait(consumer)
    with torch.cuda.stream(consumer):
        total = dev.tensor.double().sum()
    consumer.synchronize()
    assert total.item() == pytest.approx(host.tensor.double().sum().item())


# -- the CPU copy stream --------------------------------------------------------


def test_cpu_stream_copies_in_order_and_can_be_held():
    import threading

    spec = PoolSpec.kv((2,), torch.float32)
    src = filled(spec, 8, "cpu", seed=3)
    dst = PoolBuffer(spec, 8, "cpu")
    engine = CopyEngine("cpu", cpu_stream=True)
    release = threading.Event()
    started = threading.Event()
    order = []

    def hold():
        order.append("first")
        started.set()
        assert release.wait(5), "test never released the held copy"

    first = engine.copy_slots(dst, slots([0, 1]), src, slots([4, 5]), on_start=hold)
    second = engine.copy_slots(dst, slots([2]), src, slots([6]), on_start=lambda: order.append("second"))
    assert started.wait(5)
    assert not first.done() and not second.done()  # FIFO: the second waits behind the held first
    with pytest.raises(CopyTimeout, match="did not complete within 0.05 s"):
        first.wait(timeout_s=0.05)
    release.set()
    second.wait(timeout_s=5)
    assert first.done() and order == ["first", "second"]
    assert slot_bytes(dst, 0) == slot_bytes(src, 4) and slot_bytes(dst, 2) == slot_bytes(src, 6)
    engine.close()
    assert not any(t.is_alive() for t in engine.threads)


def test_cpu_stream_reports_a_failed_copy():
    from caches.core.copy_engine import CopyError

    spec = PoolSpec.kv((2,), torch.float32)
    a, b = PoolBuffer(spec, 4, "cpu"), PoolBuffer(spec, 4, "cpu")
    engine = CopyEngine("cpu", cpu_stream=True)

    def fault():
        raise OSError("injected")

    handle = engine.copy_slots(a, slots([0]), b, slots([1]), on_start=fault)
    with pytest.raises(CopyError, match="failed: OSError: injected"):
        handle.wait(timeout_s=5)
    # The stream survives a failed copy.
    engine.copy_slots(a, slots([1]), b, slots([2])).wait(timeout_s=5)
    engine.close()
