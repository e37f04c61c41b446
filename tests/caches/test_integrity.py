"""No stale or foreign bytes: every stored page carries a checksum bound to its key, and a
storage namespace keeps caches whose bytes are not interchangeable apart.

Damage is done to real page files on disk; what was loaded is compared with
bytes the test generated, never with what the cache reports.
"""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest
import torch

from caches.core.hashing import page_hashes
from caches.core.pools import MEMORY_LAYOUT, PoolSpec
from caches.storage import FileStorage, pool_key
from caches.storage.file_backend import FILE_HEADER
from caches.storage.integrity import CHECKSUMS, checksum
from caches.storage.namespace import StorageNamespace

NAMES = ("hiradix", "unified_radix", "hi_mamba_radix")


def stored_path(cache, key: str):
    path = cache.storage.path_for(key)
    assert path.is_file(), f"page {key[:16]}... is not stored at {path}"
    return path


def flip_payload_byte(path, offset_from_end: int = 1) -> None:
    raw = bytearray(path.read_bytes())
    raw[-offset_from_end] ^= 0x5A
    path.write_bytes(bytes(raw))


def load(cache, tokens) -> tuple[int, dict[str, torch.Tensor]]:
    m = cache.match_prefix(tokens)
    if m.host_hit_tokens:
        assert cache.load_back(m.host_node) is not None
        m = cache.match_prefix(tokens)
    return m.device_hit_tokens, cache.read_device(m.device_slots, state_node=m.device_node)


def prefetch(cache, tokens, request_id="r1") -> int:
    assert cache.prefetch_from_storage(request_id, tokens) > 0
    cache.wait_prefetch_io(request_id)
    for _ in range(5):
        done = cache.check_prefetch_progress([request_id])
        if request_id in done:
            cache.check_prefetch_progress([])
            return done[request_id]
    raise AssertionError(f"prefetch {request_id} did not finish")


def assert_loaded_prefix_is_the_written_one(cache, oracle, tokens, data, loaded_tokens, got) -> None:
    for spec in cache.specs:
        if spec.unit == "token":
            assert oracle.same_bytes(got[spec.name], data[spec.name][:loaded_tokens]), f"pool {spec.name}: loaded bytes differ"
        elif spec.name in got:
            expected = oracle.data(cache, tokens[:loaded_tokens])[spec.name]
            assert oracle.same_bytes(got[spec.name], expected), f"pool {spec.name}: a foreign or damaged state was loaded"


# --- 2. bit rot ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("pool", ["kv", "indexer", "mamba"])
def test_flipped_payload_bytes_are_a_recorded_miss_for_that_page_and_after(cache_factory, oracle, name, pool):
    cache = cache_factory.build(name)
    if pool not in cache.host_pools:
        pytest.skip(f"{name} has no {pool} pool")
    tokens, data = oracle.in_storage_only(cache, 11, 4)
    hashes = page_hashes(tokens, cache.page_size)
    damaged = 3 if cache.host_pools[pool].spec.unit == "state" else 1  # a state lives at the last page only
    key = pool_key(hashes[damaged], pool)
    flip_payload_byte(stored_path(cache, key))
    is_state = cache.host_pools[pool].spec.unit == "state"
    committed = prefetch(cache, tokens)
    if not is_state:  # a state page only ends a match; KV before it may still be committed
        assert committed <= damaged * cache.page_size, f"{committed} tokens committed past the damaged page {damaged} of {pool}"
    faults = [f for f in cache.storage.faults.snapshot() if f.key == key]
    assert faults and "checksum" in faults[0].reason, cache.storage.faults.snapshot()
    loaded, got = load(cache, tokens)
    assert_loaded_prefix_is_the_written_one(cache, oracle, tokens, data, loaded, got)
    if is_state:
        assert pool not in got, "the damaged state was loaded"
    else:
        assert loaded <= damaged * cache.page_size


PAYLOAD_BYTE = {"first": lambda size: 0, "middle": lambda size: size // 2, "last": lambda size: size - 1}


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("pool", ["kv", "indexer"])
@pytest.mark.parametrize("where", list(PAYLOAD_BYTE))
def test_one_flipped_payload_byte_under_an_intact_header_is_a_miss_from_that_page_on(cache_factory, oracle, name, pool, where):
    cache = cache_factory.build(name)
    if pool not in cache.host_pools:
        pytest.skip(f"{name} has no {pool} pool")
    tokens = oracle.request(15, 4)
    data = oracle.data(cache, tokens)
    for prefix in (tokens[: cache.page_size], tokens):  # a prefix end after page 0 too: a state cache can serve it
        cache.write(prefix, oracle.data(cache, prefix))
    cache.flush()
    cache.evict_all()
    keys = [pool_key(h, pool) for h in page_hashes(tokens, cache.page_size)]
    path = stored_path(cache, keys[1])
    raw = bytearray(path.read_bytes())
    header = bytes(raw[: FILE_HEADER.size])
    raw[FILE_HEADER.size + PAYLOAD_BYTE[where](len(raw) - FILE_HEADER.size)] ^= 0x01  # one bit of one payload byte
    path.write_bytes(bytes(raw))
    assert path.read_bytes()[: FILE_HEADER.size] == header and len(path.read_bytes()) == len(raw)

    assert prefetch(cache, tokens) == cache.page_size, "not exactly the pages before the damaged one were committed"
    faults = [f for f in cache.storage.faults.snapshot() if f.key == keys[1]]
    assert faults and "checksum" in faults[0].reason, cache.storage.faults.snapshot()
    loaded, got = load(cache, tokens)
    if pool == "kv" or not cache.state_pools:
        assert loaded == cache.page_size
    else:  # found only by the sidecar get, which fetched the state of the whole hit: F4 keeps it off the shorter commit
        assert loaded in (0, cache.page_size)
    assert_loaded_prefix_is_the_written_one(cache, oracle, tokens, data, loaded, got)
    later = [torch.zeros_like(cache.host_pools[pool].tensor[: cache.page_size]) for _ in keys[2:]]
    assert cache.storage.get(keys[2:], later) == [True, True], "the pages after it are intact: only the prefix rule misses them"


@pytest.mark.parametrize("name", NAMES)
def test_a_page_file_moved_under_another_key_is_never_served(cache_factory, oracle, name):
    cache = cache_factory.build(name)
    tokens, data = oracle.in_storage_only(cache, 12, 3)
    hashes = page_hashes(tokens, cache.page_size)
    # Same size, valid header and checksum for its own bytes: only the key binding tells.
    stored_path(cache, hashes[1]).write_bytes(stored_path(cache, hashes[2]).read_bytes())
    committed = prefetch(cache, tokens)
    assert committed <= cache.page_size
    loaded, got = load(cache, tokens)
    assert_loaded_prefix_is_the_written_one(cache, oracle, tokens, data, loaded, got)


def test_checksums_match_an_independent_computation_and_see_any_single_flip():
    g = torch.Generator().manual_seed(3)
    for nbytes in (8, 24, 4096, 13, 5):
        page = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, generator=g)
        raw = bytes(page.tolist())
        padded = raw + b"\0" * (-len(raw) % 8)
        words = [int.from_bytes(padded[i : i + 8], "little") for i in range(0, len(padded), 8)]
        assert checksum("sum64", page) == sum(words) % 2**64
        import zlib

        assert checksum("crc32", page) == zlib.crc32(raw)
        for algorithm in CHECKSUMS:
            for bit in (0, 7, nbytes * 8 - 1):
                flipped = page.clone()
                flipped[bit // 8] ^= 1 << (bit % 8)
                assert checksum(algorithm, flipped) != checksum(algorithm, page), (algorithm, nbytes, bit)


@pytest.mark.parametrize("algorithm", sorted(CHECKSUMS))
def test_file_storage_verifies_each_algorithm_and_a_reader_follows_the_writer(tmp_path, algorithm):
    writer = FileStorage(tmp_path / "s", checksum=algorithm)
    reader = FileStorage(tmp_path / "s")  # the header names the algorithm
    keys = [f"{i:064x}" for i in range(1, 4)]
    pages = [torch.arange(6, dtype=torch.float32) + i for i in range(3)]
    assert writer.set(keys, pages) == [True] * 3
    flip_payload_byte(writer.path_for(keys[1]), offset_from_end=3)
    targets = [torch.zeros(6) for _ in keys]
    assert reader.get(keys, targets) == [True, False, True]
    assert torch.equal(targets[0], pages[0]) and torch.equal(targets[2], pages[2])
    assert [f.key for f in reader.faults] == [keys[1]] and "checksum" in reader.faults[0].reason
    writer.close()
    reader.close()


def test_batched_and_per_page_verification_agree_on_a_shared_buffer(tmp_path):
    store = FileStorage(tmp_path / "s", read_threads=1)
    buffer = torch.zeros(8, 16)  # 8 pages of 64 bytes in one buffer, as host pools hold them
    keys = [f"{i:064x}" for i in range(1, 9)]
    pages = [torch.full((16,), float(i)) for i in range(8)]
    store.set(keys, pages)
    flip_payload_byte(store.path_for(keys[5]))
    assert store.get(keys, [buffer[i] for i in range(8)]) == [True] * 5 + [False] + [True] * 2
    odd = [buffer[i] for i in (0, 2, 3, 7)]  # not evenly spaced: per-page verification
    assert store.get([keys[i] for i in (0, 2, 3, 7)], odd) == [True] * 4
    store.close()


# --- 10. the storage namespace --------------------------------------------------------------------


# Each alone: dtype and layout keep a page's size (float16 and bfloat16, (2, 3) and (3, 2)),
# so only the namespace keeps the reader from taking the writer's bytes.
ONLY = {
    "dtype": {"dtype": "bfloat16"},
    "layout": {"kv_elem_shape": (3, 2)},
    "page_size": {"page_size": 8},
    "model": {"model_name": "model-b"},
}


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("field", list(ONLY))
def test_caches_differing_only_in_one_field_never_serve_each_others_pages(cache_factory, oracle, name, field):
    same = {"dtype": "float16", "model_name": "model-a", "kv_elem_shape": (2, 3), "page_size": 4}
    writer = cache_factory.build(name, **same)
    tokens, _ = oracle.in_storage_only(writer, 13, 2)  # 8 tokens: two pages of 4, one of 8
    reader = cache_factory.build(name, **{**same, **ONLY[field]})  # the same storage directory
    assert reader.prefetch_from_storage("r1", tokens) == len(tokens)
    reader.wait_prefetch_io("r1")
    assert reader.check_prefetch_progress(["r1"]) == {"r1": 0}, f"a cache differing only in {field} was served the other's pages"
    assert reader.match_prefix(tokens).matched_tokens == 0
    assert reader.storage_namespace.digest != writer.storage_namespace.digest, f"the namespace digest does not state {field}"
    assert prefetch(writer, tokens) == len(tokens), "the writer's pages are gone: the reader's miss proves nothing"


@pytest.mark.parametrize("name", NAMES)
def test_a_cache_with_compatible_bytes_shares_the_namespace(cache_factory, oracle, name):
    writer = cache_factory.build(name, model_name="model-a")
    tokens, data = oracle.in_storage_only(writer, 14, 2)
    reader = cache_factory.build(name, model_name="model-a", host_pages=8, device_pages=8, prefetch_policy="best_effort")
    assert reader.storage_namespace == writer.storage_namespace
    assert prefetch(reader, tokens) == len(tokens)
    loaded, got = load(reader, tokens)
    assert loaded == len(tokens)
    assert_loaded_prefix_is_the_written_one(reader, oracle, tokens, data, loaded, got)


def test_a_page_carrying_another_namespace_tag_is_a_miss(tmp_path):
    key = "b" * 64
    a = FileStorage(tmp_path / "s", namespace="model-a")
    assert a.set([key], [torch.ones(4)]) == [True]
    b = FileStorage(tmp_path / "s", namespace="model-b")
    assert b.exists_prefix([key]) == 1
    assert b.get([key], [torch.zeros(4)]) == [False]
    assert "namespace" in b.faults[0].reason
    a.close()
    b.close()


def test_the_namespace_is_written_down_next_to_the_pages(cache_factory, tmp_path):
    cache = cache_factory.build("hi_mamba_radix", model_name="model-a")
    described = json.loads((cache.storage.root.parent / "namespace.json").read_text())
    assert described == {
        "model_name": "model-a",
        "dtype": {"kv": "float32", "mamba": "float32"},
        "layout": {
            "kv": {"unit": "token", "elem_shape": [2, 3], "memory": MEMORY_LAYOUT},
            "mamba": {"unit": "state", "elem_shape": [6], "memory": MEMORY_LAYOUT},
        },
        "page_size": cache.page_size,
        "world_size": 1,
    }
    assert cache.storage.root.name == "rank0"


def namespace(dtype=torch.float16, kv_shape=(2, 3), **fields) -> StorageNamespace:
    specs = [PoolSpec.kv(kv_shape, dtype), PoolSpec.mamba((6,), dtype)]
    return StorageNamespace.of(**{"model_name": "model-a", "page_size": 4, "specs": specs, "world_size": 2, "rank": 0, **fields})


def other_memory_layout(ns: StorageNamespace) -> StorageNamespace:
    layout = tuple((pool, dataclasses.replace(l, memory="page_major") if pool == "kv" else l) for pool, l in ns.layout)
    return dataclasses.replace(ns, layout=layout)


@pytest.mark.parametrize("field, changed", [
    ("dtype", lambda: namespace(dtype=torch.bfloat16)),
    ("layout: element shape", lambda: namespace(kv_shape=(3, 2))),
    ("layout: memory", lambda: other_memory_layout(namespace())),
    ("page_size", lambda: namespace(page_size=8)),
    ("world_size", lambda: namespace(world_size=4)),
    ("model_name", lambda: namespace(model_name="model-b")),
])
def test_the_digest_states_each_field(field, changed):
    assert changed().digest != namespace().digest, f"two namespaces differing only in {field} share a digest"


def test_the_namespace_names_each_field_once():
    described = namespace().describe()
    assert set(described) == {"model_name", "dtype", "layout", "page_size", "world_size"}  # the rank: its folder and tag
    assert "dtype" not in json.dumps(described["layout"]), "the layout repeats the dtype: a digest dropping one would go unseen"


def test_the_rank_names_its_folder_and_its_pages_tag(tmp_path):
    rank0, rank1 = namespace(rank=0), namespace(rank=1)
    assert rank0.digest == rank1.digest and rank0.folder == rank1.folder, "the ranks of one deployment share a folder"
    assert rank0.tag != rank1.tag and rank0.rank_root(tmp_path) != rank1.rank_root(tmp_path)
    key = "c" * 64
    with FileStorage(rank0.rank_root(tmp_path), namespace=rank0.tag) as writer, \
         FileStorage(rank1.rank_root(tmp_path), namespace=rank1.tag) as reader:
        assert writer.set([key], [torch.ones(4)]) == [True]
        moved = reader.path_for(key)
        moved.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(writer.path_for(key), moved)  # another rank's shard of the page, header and checksum intact
        assert reader.exists_prefix([key]) == 1
        assert reader.get([key], [torch.zeros(4)]) == [False], "a page of another rank was served"
        assert "namespace" in reader.faults[0].reason
