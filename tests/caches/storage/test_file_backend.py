"""FileStorage specifics: on-disk layout, corruption detection, root checks, races."""

import os
import threading

import pytest
import torch

from caches.storage import file_backend

from caches.storage import FileStorage, StorageConfigError
from caches.storage.file_backend import FILE_HEADER, FILE_MAGIC, namespace_tag
from caches.storage.integrity import CHECKSUMS, bound_checksum, checksum


@pytest.fixture
def store(tmp_path):
    storage = FileStorage(tmp_path / "root")
    yield storage
    storage.close()


def stored_page(store, helpers, label="page", numel=32, seed=0):
    key = helpers.hash(label)
    page = helpers.page((numel,), torch.float32, seed=seed)
    assert store.set([key], [page]) == [True]
    return key, page


def test_layout_fans_out_by_first_two_hex_digits(store, helpers):
    key, page = stored_page(store, helpers)
    path = store.path_for(key)
    assert path == store.root / key[:2] / key
    assert path.is_file()
    # Header then the raw payload, nothing else.
    data = path.read_bytes()
    magic, version, algorithm, length, tag, stored = FILE_HEADER.unpack(data[:FILE_HEADER.size])
    assert (magic, version, algorithm, length) == (FILE_MAGIC, 2, CHECKSUMS["sum64"], page.numel() * 4)
    assert tag == namespace_tag("") and stored == bound_checksum(checksum("sum64", page), key)
    assert data[FILE_HEADER.size:] == helpers.bytes_of(page)
    # No temporary or probe file is left behind.
    assert sorted(p.name for p in store.root.rglob("*")) == [key[:2], key]


def test_extra_pool_keys_share_the_hash_directory(store, helpers):
    h = helpers.hash("pooled")
    store.set([h, h + ".indexer"], [torch.ones(2), torch.zeros(3)])
    assert sorted(p.name for p in (store.root / h[:2]).iterdir()) == [h, h + ".indexer"]


def corrupt(path, transform):
    data = path.read_bytes()
    path.write_bytes(transform(data))


@pytest.mark.parametrize(
    "transform, reason",
    [
        (lambda d: d[:-1], "truncated payload: 127 of 128 bytes"),
        (lambda d: d[: FILE_HEADER.size], "truncated payload: 0 of 128 bytes"),
        (lambda d: d[:10], "truncated header"),
        (lambda d: b"", "truncated header"),
        (lambda d: b"JUNK" + d[4:], "foreign file"),
        (lambda d: b"\x89PNG\r\n\x1a\n" * 32, "foreign file"),
        (lambda d: d[:4] + (7).to_bytes(2, "little") + d[6:], "unsupported format version 7"),
        (lambda d: d + b"\x00", "trailing bytes"),
        (lambda d: d[:6] + (9).to_bytes(2, "little") + d[8:], "unknown checksum algorithm id 9"),
        (lambda d: d[:16] + bytes([d[16] ^ 1]) + d[17:], "page of another namespace"),
        (lambda d: d[:24] + bytes([d[24] ^ 1]) + d[25:], "checksum mismatch"),
        (lambda d: d[:-1] + bytes([d[-1] ^ 0x80]), "checksum mismatch"),
    ],
    ids=["short-by-one", "header-only", "half-header", "empty", "bad-magic",
         "png", "future-version", "trailing", "unknown-checksum", "other-namespace",
         "stored-checksum-flipped", "payload-bit-flipped"],
)
def test_damaged_file_is_a_miss_and_a_fault(store, helpers, transform, reason):
    key, _page = stored_page(store, helpers)
    corrupt(store.path_for(key), transform)
    # The file exists, so the existence check passes; the get must still miss.
    assert store.exists_prefix([key]) == 1
    assert store.get([key], [torch.empty(32)]) == [False]
    faults = store.faults.snapshot()
    assert len(faults) == 1 and faults[0].key == key
    assert reason in faults[0].reason


@pytest.mark.parametrize("damaged", [0, 1])
def test_a_page_whose_algorithm_id_names_another_algorithm_misses_alone(store, helpers, damaged):
    """Pages of two checksum algorithms in one read: the one that mismatches is a miss, the other still a hit, whichever is checked first."""
    keys = [stored_page(store, helpers, label=f"page{i}", seed=i)[0] for i in range(2)]
    crc32 = CHECKSUMS["crc32"].to_bytes(2, "little")
    corrupt(store.path_for(keys[damaged]), lambda d: d[:6] + crc32 + d[8:])
    got = store.get(keys, [torch.empty(32), torch.empty(32)])
    assert got == [i != damaged for i in range(2)]
    assert "checksum mismatch (crc32)" in store.faults[0].reason


def test_size_in_header_that_differs_from_target_is_a_miss(store, helpers):
    key, _page = stored_page(store, helpers, numel=32)
    assert store.get([key], [torch.empty(16)]) == [False]
    assert "stored page is 128 bytes, target holds 64" in store.faults[0].reason


def test_existing_key_is_not_rewritten(store, helpers):
    key, _page = stored_page(store, helpers)
    before = store.path_for(key).stat()
    assert store.set([key], [torch.zeros(32)]) == [True]
    after = store.path_for(key).stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_creates_a_missing_nested_root(tmp_path):
    root = tmp_path / "a" / "b" / "c"
    FileStorage(str(root))
    assert root.is_dir()
    assert list(root.iterdir()) == []  # the probe file was removed


def test_root_that_is_a_regular_file_is_rejected(tmp_path):
    root = tmp_path / "plain-file"
    root.write_bytes(b"x")
    with pytest.raises(StorageConfigError) as info:
        FileStorage(root)
    assert str(info.value) == (
        f"storage root '{root}' is unusable: it exists and is not a directory"
    )


def test_root_below_a_regular_file_is_rejected(tmp_path):
    (tmp_path / "plain-file").write_bytes(b"x")
    root = tmp_path / "plain-file" / "store"
    with pytest.raises(StorageConfigError, match="is unusable: cannot create it"):
        FileStorage(root)


@pytest.mark.skipif(
    hasattr(os, "geteuid") and os.geteuid() == 0,
    reason="running as root: root ignores directory permission bits",
)
def test_read_only_root_is_rejected(tmp_path):
    root = tmp_path / "read-only"
    root.mkdir()
    root.chmod(0o500)
    try:
        with pytest.raises(StorageConfigError) as info:
            FileStorage(root)
        assert str(info.value).startswith(
            f"storage root '{root}' is unusable: cannot create and remove a file in it"
        )
    finally:
        root.chmod(0o700)


@pytest.mark.parametrize("root", ["", 42])
def test_root_argument_type_is_checked(root):
    with pytest.raises(StorageConfigError, match="expected a non-empty path"):
        FileStorage(root)


def test_concurrent_writers_of_one_key_leave_a_complete_file(store, helpers):
    """Writers race on one key; the published file is whole and one writer's page."""
    writers = 8
    key = helpers.hash("contended")
    numel = 64 * 1024  # 256 KiB: large enough that writes overlap in time
    pages = [helpers.page((numel,), torch.float32, seed=s) for s in range(writers)]
    barrier = threading.Barrier(writers, timeout=10)
    results: list[list[bool]] = []
    errors: list[BaseException] = []

    def write(index: int) -> None:
        try:
            barrier.wait()
            # Bypass the skip so every thread really writes and renames.
            results.append([store._set_one(key, pages[index])])
        except BaseException as exc:  # collected and re-raised in the test thread
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
        assert not thread.is_alive(), "a writer thread hung"
    assert errors == [] and results == [[True]] * writers
    target = torch.empty(numel)
    assert store.get([key], [target]) == [True]
    assert helpers.bytes_of(target) in {helpers.bytes_of(p) for p in pages}
    assert os.path.getsize(store.path_for(key)) == FILE_HEADER.size + numel * 4
    assert sorted(p.name for p in store.path_for(key).parent.iterdir()) == [key]


@pytest.mark.parametrize("read_threads", [1, 2, 3])
def test_parallel_reads_keep_order_misses_and_faults(tmp_path, read_threads, monkeypatch):
    monkeypatch.setattr(file_backend, "PARALLEL_READ_MIN_BYTES", 0)  # these small pages go to the helpers too
    storage = FileStorage(tmp_path / "pages", read_threads=read_threads)
    keys = [f"{i:064x}" for i in range(1, 8)]
    pages = [torch.full((4,), float(i)) for i in range(7)]
    assert storage.set(keys[:5], pages[:5]) == [True] * 5
    # Damage one stored page: a miss with a fault, whichever reader gets it.
    with open(storage.path_for(keys[3]), "r+b") as f:
        f.truncate(10)
    targets = [torch.zeros(4) for _ in keys]
    assert storage.get(keys, targets) == [True, True, True, False, True, False, False]
    for i in (0, 1, 2, 4):
        assert torch.equal(targets[i], pages[i])
    assert [fault.key for fault in storage.faults] == [keys[3]]
    storage.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("FileStorage-read")]


def readers() -> set:
    return {t for t in threading.enumerate() if t.name.startswith("FileStorage-read")}


def test_a_small_batch_is_read_by_the_caller_alone(tmp_path):
    before = readers()
    storage = FileStorage(tmp_path / "pages", read_threads=3)
    keys = [f"{i:064x}" for i in range(1, 5)]
    pages = [torch.full((4,), float(i)) for i in range(4)]
    assert storage.set(keys, pages) == [True] * 4
    targets = [torch.zeros(4) for _ in keys]
    assert storage.get(keys, targets) == [True] * 4
    assert all(torch.equal(t, p) for t, p in zip(targets, pages))
    assert not readers() - before, "a helper thread started for a 64-byte batch"
    storage.close()


def test_read_threads_validated(tmp_path):
    with pytest.raises(ValueError, match="read_threads=0 is invalid"):
        FileStorage(tmp_path / "x", read_threads=0)
