"""Behaviour both backends share (each test runs on FileStorage and MemoryStorage)."""

import threading

import pytest
import torch

from caches.core.pools import PoolBuffer, PoolSpec
from caches.storage import (
    PoolTransfer,
    StorageClosedError,
    StorageFault,
    StorageKeyError,
    StorageTensorError,
    pool_key,
)

DTYPES = [torch.bfloat16, torch.float32, torch.float16, torch.int8, torch.int64]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_round_trip_is_byte_exact(backend, helpers, dtype):
    keys = [helpers.hash(f"{dtype}-{i}") for i in range(4)]
    pages = [helpers.page((16, 2, 8), dtype, seed=i) for i in range(4)]
    assert backend.set(keys, pages) == [True] * 4
    targets = [torch.zeros((16, 2, 8), dtype=dtype) for _ in keys]
    assert backend.get(keys, targets) == [True] * 4
    for page, target in zip(pages, targets):
        assert helpers.bytes_of(target) == helpers.bytes_of(page)
    assert len(backend.faults) == 0


def test_get_reads_straight_into_host_pool_pages(backend, helpers):
    spec = PoolSpec.kv((2, 4), torch.bfloat16)
    page_size = 8
    host = PoolBuffer.host(spec, 4 * page_size, for_device="cpu")
    keys = [helpers.hash(f"p{i}") for i in range(3)]
    pages = [helpers.page((page_size, 2, 4), torch.bfloat16, seed=10 + i) for i in range(3)]
    backend.set(keys, pages)
    # Land the pages in host pages 3, 1, 0 (page 2 must stay untouched).
    order = [3, 1, 0]
    views = [host.page_view(p * page_size, page_size) for p in order]
    assert backend.get(keys, views) == [True, True, True]
    for page, p in zip(pages, order):
        assert helpers.bytes_of(host.tensor[p * page_size:(p + 1) * page_size]) == (
            helpers.bytes_of(page)
        )
    assert helpers.bytes_of(host.tensor[2 * page_size:3 * page_size]) == bytes(
        page_size * 2 * 4 * 2
    )


def test_exists_prefix_stops_at_first_miss(backend, helpers):
    keys = [helpers.hash(f"k{i}") for i in range(5)]
    page = helpers.page((4,), torch.float32, seed=0)
    backend.set([keys[0], keys[1], keys[3], keys[4]], [page] * 4)
    assert backend.exists_prefix(keys) == 2
    assert backend.exists_prefix(keys[3:]) == 2
    assert backend.exists_prefix(keys[2:]) == 0
    assert backend.exists_prefix([]) == 0


def test_missing_key_is_a_miss_without_fault(backend, helpers):
    target = torch.zeros(4)
    assert backend.get([helpers.hash("absent")], [target]) == [False]
    assert len(backend.faults) == 0


def test_set_skips_an_existing_key(backend, helpers):
    key = helpers.hash("once")
    first = helpers.page((8,), torch.float32, seed=1)
    second = helpers.page((8,), torch.float32, seed=2)
    assert helpers.bytes_of(first) != helpers.bytes_of(second)
    assert backend.set([key], [first]) == [True]
    assert backend.set([key], [second]) == [True]
    target = torch.empty(8)
    assert backend.get([key], [target]) == [True]
    assert helpers.bytes_of(target) == helpers.bytes_of(first)


def test_wrong_size_target_is_a_miss_and_a_fault(backend, helpers):
    key = helpers.hash("sized")
    backend.set([key], [helpers.page((8,), torch.float32, seed=3)])
    for wrong in (torch.zeros(7), torch.zeros(9), torch.zeros(8, dtype=torch.float16)):
        assert backend.get([key], [wrong]) == [False]
    faults = backend.faults.snapshot()
    assert len(faults) == 3
    assert all(isinstance(f, StorageFault) and f.key == key for f in faults)
    assert "size mismatch" in faults[0].reason
    # The page itself is intact and still served to a fitting target.
    assert backend.get([key], [torch.zeros(8)]) == [True]


def test_batch_reports_each_key(backend, helpers):
    keys = [helpers.hash(f"b{i}") for i in range(3)]
    page = helpers.page((4,), torch.float32, seed=4)
    backend.set([keys[0], keys[2]], [page, page])
    targets = [torch.zeros(4), torch.zeros(4), torch.zeros(5)]
    assert backend.get(keys, targets) == [True, False, False]
    assert [f.key for f in backend.faults] == [keys[2]]


def test_v2_multi_pool_transfers(backend, helpers):
    hashes = [helpers.hash(f"v2-{i}") for i in range(3)]
    kv = [helpers.page((8, 4), torch.bfloat16, seed=20 + i) for i in range(3)]
    idx = [helpers.page((8, 2), torch.float32, seed=30 + i) for i in range(3)]
    mamba = [helpers.page((6,), torch.float32, seed=40)]
    results = backend.set_v2([
        PoolTransfer("kv", hashes, kv),
        PoolTransfer("indexer", hashes[:2], idx[:2]),
        PoolTransfer("mamba", hashes[2:], mamba),
    ])
    assert results == [[True] * 3, [True, True], [True]]
    # Extra pools live under '<hash>.<pool>', KV under the bare hash.
    assert backend.exists_prefix(hashes) == 3
    assert backend.exists_prefix([pool_key(h, "indexer") for h in hashes]) == 2
    assert backend.exists_prefix([hashes[2] + ".mamba"]) == 1
    assert backend.exists_prefix([hashes[0] + ".mamba"]) == 0

    kv_out = [torch.zeros(8, 4, dtype=torch.bfloat16) for _ in hashes]
    idx_out = [torch.zeros(8, 2) for _ in hashes]
    mamba_out = [torch.zeros(6)]
    results = backend.get_v2([
        PoolTransfer("kv", hashes, kv_out),
        PoolTransfer("indexer", hashes, idx_out),
        PoolTransfer("mamba", hashes[2:], mamba_out),
    ])
    assert results == [[True] * 3, [True, True, False], [True]]
    for want, got in zip(kv + idx[:2] + mamba, kv_out + idx_out[:2] + mamba_out):
        assert helpers.bytes_of(got) == helpers.bytes_of(want)


def test_v2_validates_every_transfer_before_any_io(backend, helpers):
    good = PoolTransfer("kv", [helpers.hash("g")], [torch.ones(4)])
    bad = PoolTransfer("indexer", [helpers.hash("b")], [torch.ones(4, 2).t()])
    with pytest.raises(StorageTensorError, match="not contiguous"):
        backend.set_v2([good, bad])
    assert backend.exists_prefix([helpers.hash("g")]) == 0


def test_pool_transfer_keys_are_bare_hashes(helpers):
    with pytest.raises(StorageKeyError, match="page hash"):
        PoolTransfer("indexer", [helpers.hash("x") + ".indexer"], [torch.ones(1)]).storage_keys()
    with pytest.raises(StorageTensorError, match="2 keys and 1 tensors"):
        PoolTransfer("kv", [helpers.hash("a"), helpers.hash("b")], [torch.ones(1)])
    with pytest.raises(StorageKeyError, match="pool name 'KV'"):
        PoolTransfer("KV", [], [])


@pytest.mark.parametrize(
    "bad_key",
    [
        "../x",
        "/etc/passwd",
        "a" * 63,
        "a" * 65,
        "A" * 64,
        "g" * 64,
        "../" + "a" * 61,
        "a" * 64 + "/../../x",
        "a" * 64 + ".",
        "a" * 64 + ".KV",
        "a" * 64 + ".1pool",
        "a" * 64 + ".kv.x",
        "",
        "a" * 64 + "\n",
    ],
)
def test_invalid_keys_are_rejected_before_any_io(backend, bad_key, tmp_path):
    before = sorted(p.name for p in tmp_path.rglob("*"))
    message = f"storage key '{bad_key}' is invalid: expected 64 lowercase hex digits"
    for call in (
        lambda: backend.set([bad_key], [torch.ones(2)]),
        lambda: backend.get([bad_key], [torch.ones(2)]),
        lambda: backend.exists_prefix([bad_key]),
    ):
        with pytest.raises(StorageKeyError) as info:
            call()
        assert str(info.value).startswith(message)
        assert isinstance(info.value, ValueError)
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_a_bad_key_later_in_the_batch_stores_nothing(backend, helpers):
    good = helpers.hash("first")
    with pytest.raises(StorageKeyError):
        backend.set([good, "nope"], [torch.ones(2), torch.ones(2)])
    assert backend.exists_prefix([good]) == 0


def test_pool_key():
    h = "ab" * 32
    assert pool_key(h, "kv") == h
    assert pool_key(h, "indexer") == h + ".indexer"
    with pytest.raises(StorageKeyError):
        pool_key(h.upper(), "kv")
    with pytest.raises(StorageKeyError):
        pool_key(h, "Bad")


def test_tensor_arguments_are_validated(backend, helpers):
    key = helpers.hash("t")
    with pytest.raises(StorageTensorError, match="1 keys and 2 sources"):
        backend.set([key], [torch.ones(1), torch.ones(1)])
    with pytest.raises(StorageTensorError, match="not contiguous"):
        backend.get([key], [torch.ones(4, 4).t()])
    with pytest.raises(StorageTensorError, match="expected a CPU tensor"):
        backend.set([key], [b"bytes"])
    with pytest.raises(StorageTensorError, match="on device 'meta'"):
        backend.get([key], [torch.empty(4, device="meta")])


def test_remove_then_miss(backend, helpers):
    keys = [helpers.hash("r0"), helpers.hash("r1")]
    backend.set(keys, [torch.ones(2), torch.ones(2)])
    assert backend.remove([keys[0], helpers.hash("never")]) == 1
    assert backend.exists_prefix(keys) == 0
    assert backend.exists_prefix(keys[1:]) == 1


def test_use_after_close_is_an_error(backend, helpers):
    backend.close()
    assert backend.closed
    with pytest.raises(StorageClosedError, match="used after close"):
        backend.exists_prefix([helpers.hash("c")])
    backend.close()  # closing twice is harmless


def test_concurrent_readers_and_writers(backend, helpers):
    workers, per_worker = 4, 16
    pages = {
        helpers.hash(f"c{w}-{i}"): helpers.page((64,), torch.float32, seed=w * 100 + i)
        for w in range(workers) for i in range(per_worker)
    }
    keys = list(pages)
    barrier = threading.Barrier(workers * 2, timeout=10)
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            barrier.wait()
            mine = keys[w * per_worker:(w + 1) * per_worker]
            assert backend.set(mine, [pages[k] for k in mine]) == [True] * per_worker
        except BaseException as exc:  # collected and re-raised in the test thread
            errors.append(exc)

    def reader() -> None:
        try:
            barrier.wait()
            for key in keys:
                target = torch.empty(64)
                if backend.get([key], [target]) == [True]:
                    # A hit is always the whole page, never a partial one.
                    assert helpers.bytes_of(target) == helpers.bytes_of(pages[key])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(workers)]
    threads += [threading.Thread(target=reader) for _ in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
        assert not thread.is_alive(), f"storage worker {thread.name} hung"
    assert errors == []
    assert backend.exists_prefix(keys) == len(keys)
    assert len(backend.faults) == 0
