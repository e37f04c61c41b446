"""unified_radix's sliding-window component: its data, LRUs, eviction and cascades, the window through every tier (F10)."""

from __future__ import annotations

import random
import threading

import pytest

import spec
from caches.adapters import CacheSession, unified_radix_indexer_swa, unified_radix_swa
from caches.config import CacheConfig
from caches.unified import SlidingWindow
from caches.unified_radix import UnifiedRadixCache
from oracles import Oracle  # tests/caches/oracles.py, importable through tests/caches/conftest.py
from spec.clock import ManualClock
from spec.errors import ConfigError
from spec.fence import window_attachable_at_terminate
from spec.trace import BACKUP, DEVICE, HOST, EventKind, TraceRecorder

PAGE = 4
WINDOW = 2 * PAGE  # the window: two pages before a match end


def make_cache(tmp_path, extra_pools=("swa",), *, trace=None, clock=None, **fields) -> UnifiedRadixCache:
    values = dict(
        page_size=PAGE, device_pages=16, host_pages=32, state_device_slots=8, state_host_slots=8, swa_device_pages=8,
        swa_host_pages=16, swa_window_tokens=WINDOW, kv_elem_shape=(2, 3), indexer_elem_shape=(5,), state_elem_shape=(7,),
        swa_elem_shape=(3,), extra_pools=tuple(extra_pools), write_policy="write_through", prefetch_policy="wait_complete",
        storage_backend="file", storage_path=str(tmp_path / "storage"), storage_batch_pages=2, wait_timeout_s=5.0,
    )
    values.update(fields)
    clock = clock or ManualClock(1000.0)
    return UnifiedRadixCache(CacheConfig(**values), clock=clock, trace=trace if trace is not None else TraceRecorder(clock))


def tokens_for(seed: int, pages: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(1, 50_000) for _ in range(pages * PAGE)]


def window(cache: UnifiedRadixCache) -> SlidingWindow:
    return cache.components["swa"]  # type: ignore[return-value]


def node_at(cache: UnifiedRadixCache, tokens: list[int]):
    match = cache.tree.match_prefix(tokens)
    assert match.matched_tokens == len(tokens)
    return match.host_node


def has(cache, tokens, tier) -> bool:
    return window(cache).slots(node_at(cache, tokens), tier) is not None


def served(cache, tokens) -> int:
    match = cache.match_prefix(tokens)
    return match.device_hit_tokens + match.host_hit_tokens


def drive(cache, request_ids, max_steps: int = 20) -> dict[str, int]:
    done: dict[str, int] = {}
    for _ in range(max_steps):
        done.update(cache.check_prefetch_progress([r for r in request_ids if r not in done]))
        if len(done) == len(request_ids):
            return done
    raise AssertionError(f"prefetches {[r for r in request_ids if r not in done]} did not finish within {max_steps} steps")


def load_and_read(cache, tokens):
    match = cache.match_prefix(tokens)
    assert cache.load_back(match.host_node) is not None
    match = cache.match_prefix(tokens)
    return match, cache.read_device(match.device_slots, state_node=match.device_node)


def prefetched(cache, tokens, request_id="r1") -> int:
    assert cache.prefetch_from_storage(request_id, tokens) > 0
    cache.wait_prefetch_io(request_id)
    return drive(cache, [request_id])[request_id]


def write_nested(cache, seed: int, pages: int, more_pages: int = 2):
    """A prefix and its extension written and backed up (the prefix ends at an inner node): (prefix, extension, data)."""
    prefix = tokens_for(seed, pages)
    extension = prefix + tokens_for(seed + 1, more_pages)
    data = Oracle.data(cache, extension)
    cache.write(prefix, data)
    cache.write(extension, data)
    cache.flush()
    return prefix, extension, data


def assert_window_bytes(loaded, data, tokens: int) -> None:
    rows = min(WINDOW, tokens)
    assert Oracle.same_bytes(loaded["swa"], data["swa"][tokens - rows : tokens]), "the window rows differ from the written ones"


# --- construction ------------------------------------------------------------------------

def test_the_window_component_owns_a_slot_group_and_pool_of_its_own(tmp_path):
    with make_cache(tmp_path, ("indexer", "swa"), storage_backend="memory") as cache:
        assert isinstance(cache.component("swa"), SlidingWindow) and cache.hooks.windows == {"swa": window(cache)}
        assert cache.token_pools == ["kv", "indexer"] and cache.window_pools == ["swa"]
        assert set(cache.slot_accounting()) == {"device:kv", "host:kv", "device:swa", "host:swa"}
        assert cache.slot_accounting()["device:swa"][2] == 8 * PAGE
        assert cache.specs[-1].window_tokens == WINDOW
    with pytest.raises(ConfigError, match="extra_pools"):
        CacheConfig(storage_backend="memory", extra_pools=("swa", "swa"))
    with pytest.raises(ConfigError, match="swa_window_tokens"):
        CacheConfig(storage_backend="memory", extra_pools=("swa",), swa_window_tokens=0)
    from caches.registry import build
    with pytest.raises(ConfigError, match="hiradix supports extra pools: indexer"):
        build("hiradix", {"storage_backend": "memory", "extra_pools": ["swa"]})


def test_a_window_rounds_up_to_whole_pages(tmp_path):
    with make_cache(tmp_path, storage_backend="memory", swa_window_tokens=5) as cache:
        assert window(cache).window_tokens == 2 * PAGE


# --- writes keep the window; a match ends where its window is -------------------------------

def test_a_write_keeps_only_its_window_and_splits_the_node_at_its_start(tmp_path):
    with make_cache(tmp_path, storage_backend="memory") as cache:
        tokens = tokens_for(1, 5)
        data = Oracle.data(cache, tokens)
        cache.write(tokens, data)
        head, tail = cache.tree.path_to(node_at(cache, tokens))
        assert (len(head.key), len(tail.key)) == (3 * PAGE, WINDOW), "the node was not split where the window starts"
        assert window(cache).slots(head, DEVICE) is None and window(cache).slots(tail, DEVICE) is not None
        assert cache.slot_accounting()["device:swa"][0] == WINDOW
        assert served(cache, tokens) == len(tokens)
        # Ends inside the head have a window with tombstoned pages: no match ends there.
        assert served(cache, tokens[: 3 * PAGE]) == 0
        _, loaded = load_and_read(cache, tokens)
        assert_window_bytes(loaded, data, len(tokens))
        Oracle.assert_exact(cache)


def test_a_prefix_shorter_than_the_window_needs_every_page(tmp_path):
    with make_cache(tmp_path, storage_backend="memory") as cache:
        tokens = tokens_for(2, 1)
        data = Oracle.data(cache, tokens)
        cache.write(tokens, data)
        assert served(cache, tokens) == PAGE
        _, loaded = load_and_read(cache, tokens)
        assert_window_bytes(loaded, data, PAGE)


# --- its own eviction, and the cascades ----------------------------------------------------

def test_window_eviction_tombstones_an_inner_node_and_keeps_its_kv(tmp_path):
    with make_cache(tmp_path, storage_backend="memory", write_policy="write_back") as cache:
        short, long = tokens_for(3, 2), None
        long = short + tokens_for(4, 2)
        cache.write(short, Oracle.data(cache, short))
        cache.write(long, Oracle.data(cache, long))
        inner = node_at(cache, short)
        assert inner.children and window(cache).slots(inner, DEVICE) is not None
        freed = cache.evict_component_device("swa", 1)
        assert freed == WINDOW, f"the least recent window (the inner node's) should go first, freed {freed}"
        assert window(cache).slots(inner, DEVICE) is None and inner.value is not None, "the inner node must keep its KV"
        assert served(cache, long) == len(long), "the longer request's window does not reach the tombstone"
        assert served(cache, short) == 0, "F10: a match ended at a node whose window is gone"
        Oracle.assert_exact(cache)


def test_window_eviction_of_a_leaf_evicts_the_leaf_whole(tmp_path):
    with make_cache(tmp_path, storage_backend="memory", write_policy="write_back") as cache:
        tokens = tokens_for(5, 2)
        cache.write(tokens, Oracle.data(cache, tokens))
        leaf = node_at(cache, tokens)
        assert cache.evict_component_device("swa", 1) == WINDOW
        assert not cache.tree.contains(leaf), "a leaf whose window goes leaves the tree (every component's data with it)"
        assert cache.tree.device_tokens() == 0
        Oracle.assert_exact(cache)


def test_a_dropped_window_drops_the_mamba_state_at_that_node(tmp_path):
    with make_cache(tmp_path, ("mamba", "swa"), storage_backend="memory", write_policy="write_back") as cache:
        short = tokens_for(6, 2)
        long = short + tokens_for(7, 2)
        cache.write(short, Oracle.data(cache, short))
        cache.write(long, Oracle.data(cache, long))
        inner = node_at(cache, short)
        assert cache.states(inner)["mamba"].device is not None
        cache.evict_component_device("swa", 1)
        assert window(cache).slots(inner, DEVICE) is None
        assert cache.states(inner)["mamba"].device is None, "the cascade: a state whose window is gone serves no match"
        assert cache.states(node_at(cache, long))["mamba"].device is not None
        Oracle.assert_exact(cache)


def test_kv_eviction_takes_the_window_with_it_on_each_tier(tmp_path):
    with make_cache(tmp_path) as cache:
        tokens = tokens_for(8, 3)
        cache.write(tokens, Oracle.data(cache, tokens))
        cache.flush()
        assert has(cache, tokens, DEVICE) and has(cache, tokens, HOST), "write-through backs the window up with its KV"
        cache.evict(cache.tree.device_tokens())
        assert not has(cache, tokens, DEVICE) and has(cache, tokens, HOST), "a demoted node keeps its host window only"
        assert served(cache, tokens) == len(tokens), "a host end with its host window is a match (load-back brings it)"
        cache.evict_host(cache.tree.host_tokens())
        assert cache.tree.node_count() == 0
        assert cache.slot_accounting()["host:swa"][0] == 0 and cache.slot_accounting()["device:swa"][0] == 0
        Oracle.assert_exact(cache)


def test_host_window_eviction_spares_a_node_a_storage_backup_reads(tmp_path):
    trace = TraceRecorder(ManualClock(1000.0))
    reached, release = threading.Event(), threading.Event()

    def hold_backup(event):
        if event.kind is EventKind.IO_START and event.value == BACKUP:
            reached.set()
            assert release.wait(5.0), "the test never released the storage backup"

    trace.set_gate(hold_backup)
    with make_cache(tmp_path, trace=trace) as cache:
        tokens = tokens_for(9, 2)
        cache.write(tokens, Oracle.data(cache, tokens))
        cache.copies.wait()
        cache.writing_check()
        assert reached.wait(5.0), "the storage backup never started"
        node = node_at(cache, tokens)
        assert node.host_ref and has(cache, tokens, HOST)
        assert cache.evict_component_host("swa", WINDOW) == 0, "a host window a storage backup reads was dropped"
        release.set()
        cache.flush()
        assert node.host_ref == 0
        assert cache.evict_component_host("swa", WINDOW) == WINDOW
        Oracle.assert_exact(cache)


def test_window_room_comes_from_the_window_lru_not_from_kv(tmp_path):
    # Device room for two windows: the third write takes the least recent window, and no KV.
    with make_cache(tmp_path, storage_backend="memory", write_policy="write_back", swa_device_pages=4) as cache:
        requests = [tokens_for(10 + i, 3) for i in range(3)]
        for tokens in requests:
            cache.write(tokens, Oracle.data(cache, tokens))
        assert cache.tree.device_tokens() == 2 * 3 * PAGE + 3 * PAGE - WINDOW, "only the first request's leaf left the device"
        assert [served(cache, t) for t in requests] == [0, 3 * PAGE, 3 * PAGE]
        Oracle.assert_exact(cache)


# --- storage and prefetch: the window travels with its own suffix --------------------------

def test_the_window_roundtrips_through_storage_under_its_own_suffix(tmp_path):
    trace = TraceRecorder(ManualClock(1000.0))
    with make_cache(tmp_path, ("indexer", "swa"), trace=trace) as cache:
        tokens = tokens_for(11, 4)
        data = Oracle.data(cache, tokens)
        cache.write(tokens, data)
        cache.flush()
        keys = {k for e in trace.events() if e.kind is EventKind.PAGE_WRITE and e.pool == "swa" for k in e.keys}
        assert len(keys) == 2 and all(k.endswith(".swa") for k in keys), keys
        files = [p.name for p in (tmp_path / "storage").rglob("*.swa*")]
        assert len(files) == 2, files
        cache.evict_all()
        assert prefetched(cache, tokens) == len(tokens)
        match, loaded = load_and_read(cache, tokens)
        assert match.device_hit_tokens == len(tokens)
        assert Oracle.same_bytes(loaded["kv"], data["kv"])
        assert_window_bytes(loaded, data, len(tokens))
        Oracle.assert_exact(cache)
    assert spec.check(trace.trace(), cache.termination) == []


def test_a_short_sidecar_clamps_the_commit_and_drops_a_window_loaded_for_another_length(tmp_path):
    """F3 clamps the commit below the KV hit; the window, loaded for the whole hit, must not be attached (F10)."""
    trace = TraceRecorder(ManualClock(1000.0))
    with make_cache(tmp_path, ("indexer", "swa"), trace=trace) as cache:
        tokens = tokens_for(12, 4)
        cache.write(tokens, Oracle.data(cache, tokens))
        cache.flush()
        cache.evict_all()
        gone = node_at_hash = None
        for path in (tmp_path / "storage").rglob("*.indexer*"):
            node_at_hash = path
        # The indexer page of the last page vanishes between the hit query and the get (failure class P6).
        hashes = [e for e in trace.events() if e.kind is EventKind.PAGE_WRITE and e.pool == "indexer"]
        last_key = hashes[-1].keys[-1]
        gone = [p for p in (tmp_path / "storage").rglob("*") if p.name.startswith(last_key)]
        assert gone and node_at_hash is not None
        held = []

        def gate(event):
            if event.kind is EventKind.IO_START and event.pool == "kv" and not held:
                held.append(event)
                for p in gone:
                    p.unlink()

        trace.set_gate(gate)
        assert prefetched(cache, tokens) == 3 * PAGE, "F3: the commit is clamped to the indexer's pages"
        assert window_attachable_at_terminate(trace.events(), "r1", "swa") == 4
        inserted = [e for e in trace.events() if e.kind is EventKind.INSERT and e.pool == "swa" and e.op == "r1"]
        assert not inserted, "F10: a window loaded for 4 pages was attached to a 3-page commit"
        assert served(cache, tokens) == 0, "no end of the 3 committed pages has its window"
        Oracle.assert_exact(cache)
    assert spec.check(trace.trace(), cache.termination) == []


def test_a_prefetch_restores_the_windows_its_anchor_lacks(tmp_path):
    """The KV stays on the host after its window was dropped there: a prefetch starts above it and brings the window back."""
    trace = TraceRecorder(ManualClock(1000.0))
    with make_cache(tmp_path, trace=trace) as cache:
        tokens, longer, data = write_nested(cache, 13, 3)
        cache.evict(cache.tree.device_tokens())
        assert cache.evict_component_host("swa", WINDOW) == WINDOW  # the least recent: the inner node's window
        assert cache.tree.host_tokens() == len(longer) and served(cache, tokens) == 0 and served(cache, longer) == len(longer)
        assert prefetched(cache, tokens) == len(tokens), "the prefetch must start at the root (the deepest usable anchor)"
        taken = [e for e in trace.events() if e.kind is EventKind.INSERT and e.pool == "swa" and e.op == "r1"]
        assert taken and len(taken[0].slots) == WINDOW
        _, loaded = load_and_read(cache, tokens)
        assert_window_bytes(loaded, data, len(tokens))
        Oracle.assert_exact(cache)
    assert spec.check(trace.trace(), cache.termination) == []


def test_load_back_brings_a_host_only_window_under_device_kv(tmp_path):
    with make_cache(tmp_path) as cache:
        tokens = tokens_for(14, 3)
        data = Oracle.data(cache, tokens)
        cache.write(tokens, data)
        cache.flush()
        cache.evict_component_device("swa", 1)  # the leaf has a host copy: it is demoted whole
        cache.write(tokens, data)  # KV back on the device, its window with it
        assert has(cache, tokens, DEVICE)
        cache.evict_component_device("swa", WINDOW)
        assert served(cache, tokens) == len(tokens)
        match, loaded = load_and_read(cache, tokens)
        assert match.device_hit_tokens == len(tokens) and has(cache, tokens, DEVICE)
        assert_window_bytes(loaded, data, len(tokens))
        Oracle.assert_exact(cache)


# Every built-in configuration with a window pool. With mamba too, dropping a device
# window drops the state there (the cascade): that end then serves no device match at all.
@pytest.mark.parametrize("adapter", [unified_radix_swa(), unified_radix_indexer_swa()], ids=lambda a: a.name)
def test_a_device_match_whose_window_is_on_the_host_only_needs_a_load_back_that_brings_it(tmp_path, adapter):
    """F10: the window is in the tier the match is served from: the match says the host serves it, and a
    caller loading back when the match says so (the adapter) reads the window."""
    with make_cache(tmp_path, adapter.default_extra_pools) as cache:
        short, long, data = write_nested(cache, 16, 2)
        assert cache.evict_component_device("swa", 1) == WINDOW  # the least recent: the inner node's window
        assert cache.tree.device_tokens() == len(long) and not has(cache, short, DEVICE) and has(cache, short, HOST)
        match = cache.match_prefix(short)
        assert (match.device_hit_tokens, match.host_hit_tokens) == (len(short), 0), "the KV is all on the device"
        assert match.host_window_tokens == {"swa": WINDOW} and match.needs_load_back, "the match hides that its window is on the host only"
        session = CacheSession(cache)
        loaded = session.load_back(short)
        assert loaded.tokens == len(short) and "swa" in loaded.data, f"F10: a {loaded.tokens}-token match was served without its window"
        assert_window_bytes(loaded.data, data, len(short))
        assert not cache.match_prefix(short).needs_load_back and session.match(short) == (len(short), 0)
        Oracle.assert_exact(cache)
