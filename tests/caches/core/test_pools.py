"""PoolSpec, PoolBuffer and PoolSet: construction, validation and slot access."""

import pytest
import torch

from conformance.implementations import devices
from caches.core.pools import (
    HitPolicy,
    PoolBuffer,
    PoolSet,
    PoolSetError,
    PoolSlotError,
    PoolSpec,
    PoolSpecError,
    tensor_bytes_view,
)

needs_cuda = devices.needs_gpu


def slots(*values):
    return torch.tensor(values, dtype=torch.int64)


# -- PoolSpec -------------------------------------------------------------------


def test_named_constructors():
    kv = PoolSpec.kv((2, 8, 64), torch.bfloat16)
    assert (kv.name, kv.unit, kv.hit_policy, kv.shares_kv_slots) == (
        "kv", "token", HitPolicy.ALL_PAGES, False
    )
    indexer = PoolSpec.indexer([128], torch.float8_e4m3fn)
    assert (indexer.name, indexer.unit, indexer.hit_policy, indexer.shares_kv_slots) == (
        "indexer", "token", HitPolicy.ALL_PAGES, True
    )
    assert indexer.elem_shape == (128,)
    mamba = PoolSpec.mamba((4, 16), torch.float32)
    assert (mamba.name, mamba.unit, mamba.hit_policy, mamba.shares_kv_slots) == (
        "mamba", "state", HitPolicy.TRAILING_PAGES, False
    )


def test_sizes_in_bytes():
    kv = PoolSpec.kv((2, 8, 64), torch.bfloat16)
    assert kv.bytes_per_slot == 2 * 8 * 64 * 2
    assert kv.bytes_per_page(16) == 16 * kv.bytes_per_slot
    mamba = PoolSpec.mamba((4, 16), torch.float32)
    assert mamba.bytes_per_slot == 256
    assert mamba.bytes_per_page(16) == 256  # a state pool's unit is one slot
    with pytest.raises(PoolSpecError, match="page_size=0 is invalid"):
        kv.bytes_per_page(0)


def test_spec_is_frozen_and_hashable():
    kv = PoolSpec.kv((4,), torch.float16)
    with pytest.raises(AttributeError):
        kv.name = "other"
    assert {kv: 1}[PoolSpec.kv([4], torch.float16)] == 1


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(name="KV"), "PoolSpec.name='KV' is invalid"),
        (dict(name="1kv"), "PoolSpec.name='1kv' is invalid"),
        (dict(name="side-pool"), "expected a lowercase identifier"),
        (dict(name="x", unit="page"), "PoolSpec.unit='page' for pool 'x' is invalid: "
                                      "accepted values are 'token', 'state'"),
        (dict(name="x", elem_shape=(0, 4)), "PoolSpec.elem_shape=(0, 4)"),
        (dict(name="x", elem_shape=(4.0,)), "expected a tuple of positive ints"),
        (dict(name="x", elem_shape=(True,)), "expected a tuple of positive ints"),
        (dict(name="x", elem_shape=4), "PoolSpec.elem_shape=4"),
        (dict(name="x", dtype="bfloat16"), "PoolSpec.dtype='bfloat16'"),
        (dict(name="x", hit_policy="all_pages"), "HitPolicy.ALL_PAGES, HitPolicy.TRAILING_PAGES"),
        (dict(name="x", shares_kv_slots=1), "PoolSpec.shares_kv_slots=1"),
        (dict(name="x", unit="state", shares_kv_slots=True), "only a token pool"),
        (dict(name="kv", shares_kv_slots=True), "only a token pool other than 'kv'"),
        (dict(name="kv", hit_policy=HitPolicy.TRAILING_PAGES), "pool 'kv' must have"),
    ],
)
def test_spec_validation(kwargs, message):
    fields = dict(
        name="x", unit="token", elem_shape=(4,), dtype=torch.float32,
        hit_policy=HitPolicy.ALL_PAGES, shares_kv_slots=False,
    )
    fields.update(kwargs)
    with pytest.raises(PoolSpecError) as info:
        PoolSpec(**fields)
    assert message in str(info.value)
    assert isinstance(info.value, ValueError)


# -- PoolBuffer -----------------------------------------------------------------


def test_buffer_shape_and_zero_fill():
    buf = PoolBuffer(PoolSpec.kv((2, 3), torch.bfloat16), 10, "cpu")
    assert buf.tensor.shape == (10, 2, 3) and buf.tensor.dtype == torch.bfloat16
    assert buf.is_host and not buf.pinned and buf.name == "kv"
    assert torch.count_nonzero(buf.tensor) == 0


def test_read_is_a_copy_and_write_lands_in_slots():
    buf = PoolBuffer(PoolSpec.kv((2,), torch.float32), 8, "cpu")
    data = torch.arange(6, dtype=torch.float32).reshape(3, 2)
    buf.write(slots(5, 0, 3), data)
    assert torch.equal(buf.tensor[5], data[0]) and torch.equal(buf.tensor[3], data[2])
    copy = buf.read(slots(0, 5))
    assert torch.equal(copy, data[[1, 0]])
    copy.fill_(-1)
    assert torch.equal(buf.tensor[0], data[1])  # the read did not alias the buffer


def test_page_view_is_a_writable_contiguous_view():
    buf = PoolBuffer(PoolSpec.kv((4,), torch.float16), 16, "cpu")
    view = buf.page_view(8, 4)
    assert view.is_contiguous() and view.shape == (4, 4)
    view.fill_(3)
    assert torch.count_nonzero(buf.tensor[8:12] == 3) == 16
    assert torch.count_nonzero(buf.tensor[:8]) == 0 and torch.count_nonzero(buf.tensor[12:]) == 0


def test_bytes_view_writes_through_for_bfloat16():
    buf = PoolBuffer(PoolSpec.kv((2,), torch.bfloat16), 4, "cpu")
    view = buf.as_bytes_view(1, 2)
    assert len(view) == 2 * 2 * 2 and not view.readonly
    # bfloat16 1.0 is 0x3f80, little-endian.
    view[:] = b"\x80\x3f" * 4
    assert buf.tensor[1:3].tolist() == [[1.0, 1.0], [1.0, 1.0]]
    assert buf.tensor[0].tolist() == [0.0, 0.0] and buf.tensor[3].tolist() == [0.0, 0.0]


def test_bytes_view_keeps_its_memory_alive():
    view = PoolBuffer(PoolSpec.kv((1024,), torch.float32), 4, "cpu").as_bytes_view(0, 4)
    view[:4] = b"\x00\x00\x80\x3f"  # the buffer object is gone; the view must still be valid
    assert bytes(view[:4]) == b"\x00\x00\x80\x3f"


def test_tensor_bytes_view_rejects_non_contiguous():
    with pytest.raises(PoolSlotError, match="not contiguous"):
        tensor_bytes_view(torch.zeros(4, 4).t())


@pytest.mark.parametrize(
    "bad, message",
    [
        (slots(0, 8), "contains slot 8, outside the pool's range [0, 8)"),
        (slots(-1), "contains slot -1"),
        (torch.tensor([1, 2], dtype=torch.int32), "dtype=torch.int32"),
        (torch.zeros(2, 1, dtype=torch.int64), "shape=(2, 1)"),
        ([1, 2], "slots for pool 'kv'=list is invalid"),
    ],
)
def test_slot_validation(bad, message):
    buf = PoolBuffer(PoolSpec.kv((2,), torch.float32), 8, "cpu")
    with pytest.raises(PoolSlotError) as info:
        buf.read(bad)
    assert message in str(info.value)


def test_write_validates_data():
    buf = PoolBuffer(PoolSpec.kv((2,), torch.float32), 8, "cpu")
    with pytest.raises(PoolSlotError, match=r"expected a tensor of shape \(2, 2\)"):
        buf.write(slots(0, 1), torch.zeros(2, 3))
    with pytest.raises(PoolSlotError, match="dtype torch.float32"):
        buf.write(slots(0, 1), torch.zeros(2, 2, dtype=torch.float64))


@pytest.mark.parametrize("first, count", [(-1, 2), (7, 2), (0, 0), (0, 9), (1.0, 2)])
def test_range_validation(first, count):
    buf = PoolBuffer(PoolSpec.kv((2,), torch.float32), 8, "cpu")
    with pytest.raises(PoolSlotError, match="for pool 'kv' is invalid"):
        buf.page_view(first, count)


def test_buffer_argument_validation():
    spec = PoolSpec.kv((2,), torch.float32)
    with pytest.raises(PoolSpecError, match="num_slots=0 for pool 'kv'"):
        PoolBuffer(spec, 0, "cpu")
    with pytest.raises(PoolSpecError, match="device='nowhere'"):
        PoolBuffer(spec, 4, "nowhere")
    with pytest.raises(PoolSpecError, match="only host"):
        PoolBuffer(spec, 4, "meta", pin_memory=True)
    with pytest.raises(PoolSpecError, match="pin_memory='yes'"):
        PoolBuffer(spec, 4, "cpu", pin_memory="yes")


def test_host_buffer_for_a_cpu_cache_is_not_pinned():
    buf = PoolBuffer.host(PoolSpec.kv((2,), torch.float32), 4, for_device="cpu")
    assert buf.is_host and not buf.pinned and not buf.tensor.is_pinned()


def test_device_buffer_on_another_device_type_has_no_byte_view():
    buf = PoolBuffer.device(PoolSpec.kv((2,), torch.float32), 4, "meta")
    assert not buf.is_host and buf.torch_device.type == "meta"
    with pytest.raises(PoolSlotError, match="only host"):
        buf.as_bytes_view(0, 1)


@pytest.mark.gpu
@needs_cuda
def test_host_buffer_for_a_cuda_cache_is_pinned():
    buf = PoolBuffer.host(PoolSpec.kv((2,), torch.float32), 4, for_device=torch.device("cuda"))
    assert buf.pinned and buf.tensor.is_pinned()
    dev = PoolBuffer.device(PoolSpec.kv((2,), torch.float32), 4, "cuda")
    dev.write(slots(1, 3), torch.ones(2, 2))
    assert dev.read(slots(3)).device.type == "cuda"
    assert dev.tensor.cpu()[[1, 3]].sum().item() == 4.0


# -- PoolSet --------------------------------------------------------------------


def test_pool_set_builds_every_pool():
    specs = [
        PoolSpec.kv((2, 4), torch.bfloat16),
        PoolSpec.indexer((8,), torch.float32),
        PoolSpec.mamba((16,), torch.float32),
    ]
    pools = PoolSet(specs, {"kv": 64, "mamba": 4}, "cpu")
    assert list(pools) == ["kv", "indexer", "mamba"]
    assert pools["indexer"].num_slots == 64  # reuses KV slot numbers
    assert pools["mamba"].num_slots == 4
    assert pools.kv is pools["kv"]
    assert [b.name for b in pools.extras] == ["indexer", "mamba"]
    assert pools.specs == specs
    with pytest.raises(KeyError, match="no pool named 'swa'"):
        pools["swa"]


def test_pool_set_host_for_cpu_is_unpinned():
    pools = PoolSet.host([PoolSpec.kv((2,), torch.float32)], {"kv": 8}, for_device="cpu")
    assert pools.kv.is_host and not pools.kv.pinned


@pytest.mark.parametrize(
    "specs, sizes, message",
    [
        ([PoolSpec.mamba((2,), torch.float32)], {"mamba": 2}, "exactly one pool must be named 'kv'"),
        ([PoolSpec.kv((2,), torch.float32), PoolSpec.kv((4,), torch.float32)], {"kv": 2},
         "duplicate pool names ['kv']"),
        ([PoolSpec.kv((2,), torch.float32)], {"kv": 2, "swa": 2}, "sizes names pools ['swa']"),
        ([PoolSpec.kv((2,), torch.float32), PoolSpec.mamba((2,), torch.float32)], {"kv": 2},
         "no entry for pool 'mamba'"),
        ([PoolSpec.kv((2,), torch.float32), PoolSpec.indexer((2,), torch.float32)],
         {"kv": 8, "indexer": 4}, "sizes['indexer']=4 is invalid"),
        ([PoolSpec.kv((2,), torch.float32)], {}, "no entry for 'kv'"),
        (["kv"], {"kv": 2}, "expected PoolSpec items"),
    ],
)
def test_pool_set_validation(specs, sizes, message):
    with pytest.raises(PoolSetError) as info:
        PoolSet(specs, sizes, "cpu")
    assert message in str(info.value)
