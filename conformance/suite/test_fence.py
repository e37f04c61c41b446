"""The fence beyond the windows: terminate stops IO, every path returns every slot,
trailing states, and no free under a pending copy (F1, F4, F5, F7, F8, F9).
"""

from __future__ import annotations

import pytest

from conformance.scenarios.copy_frees import frees_left_for_later
from conformance.scenarios.races import all_pages_extra_pools, close_and_check_trace, io_start, key_files, op_events, page_write_keys, pool_files, remove_files, served, starts_after_terminate, stored_request

from conformance.oracles.outcome import trailing_pools
from conformance.oracles.outcome import assert_loaded_bytes, assert_no_violations
from conformance.scenarios.workload import assert_whole_commit, check_untracked, drive, pass_deadline, request_data, request_tokens, store
from spec.config import TerminationConfig
from spec.trace import BACKUP, HOST, LOAD, WRITE_BACK_COPY, EventKind

PAGES = 4
BATCH = 2


def make(make_cache, policy: str, **env):
    config = TerminationConfig(policy=policy, page_size=make_cache.page_size)
    return make_cache(termination=config, batch_pages=BATCH, **env), config


def no_hit_reported(done: dict, request_id: str) -> bool:
    return done.get(request_id, 0) == 0


def held_transfer(cache, where: str):
    if where == "kv":
        return "first KV batch", io_start("kv")
    extras = all_pages_extra_pools(cache) + trailing_pools(cache)
    assert extras, "test setup: an adapter with default extra pools runs without one"
    return f"{extras[0]} get", io_start(extras[0])


# --- F1: terminate stops IO ------------------------------------------------------------

@pytest.mark.clause("F1", "F5", "S2", "S3")
@pytest.mark.parametrize("batch", ["whole", "partly_missing"])
@pytest.mark.parametrize("policy", ["best_effort", "timeout"])
def test_terminate_stops_every_later_transfer(impl, make_cache, trace, gate, clock, policy, profile, batch, tmp_path, page_size):
    """partly_missing: the held batch's second page is gone from storage, so it ends with one page loaded and one failed, after the terminate."""
    cache, config = make(make_cache, policy)
    tokens, _ = stored_request(cache, seed=31, pages=PAGES, page_size=page_size)
    held = gate.hold("first KV batch", io_start("kv"))
    assert cache.prefetch("r1", tokens) == len(tokens)
    held.wait_reached()
    if batch == "partly_missing":
        files = key_files(tmp_path / "storage", page_write_keys(trace, "kv")[1:2])
        if not files:
            pytest.skip(f"{impl.name}'s storage names no file by the page key its page_write records")
        remove_files(files)
    if policy == "timeout":
        pass_deadline(cache, clock, config, PAGES, ["r1"], profile)
    done = cache.check_progress(["r1"])
    assert "r1" in done, f"{'L2' if policy == 'timeout' else profile.counterpart('D1')}: the check did not terminate the prefetch"
    assert done == {"r1": 0}, f"F3: terminated with its only started batch in flight, the prefetch commits nothing (it committed {done['r1']} tokens)"
    held.release()
    close_and_check_trace(cache, trace, config, host_slots_left=0)
    late = starts_after_terminate(trace)
    assert not late, f"F1: {len(late)} transfers of r1 started after it was terminated: {[e.describe() for e in late]}"


# --- F8 / F5: abort with IO held ----------------------------------------------------------

@pytest.mark.clause("F8", "F5", "F1", "S2", "S3")
@pytest.mark.parametrize("where", ["kv", pytest.param("extra", marks=pytest.mark.needs("extra_pools"))])
@pytest.mark.parametrize("policy", ["best_effort", "wait_complete", "timeout"])
def test_abort_with_io_held_returns_every_slot(impl, make_cache, trace, gate, policy, where, page_size):
    cache, config = make(make_cache, policy)
    tokens, _ = stored_request(cache, seed=32, pages=PAGES, page_size=page_size)
    description, predicate = held_transfer(cache, where)
    held = gate.hold(description, predicate)
    assert cache.prefetch("r1", tokens) == len(tokens)
    held.wait_reached()
    cache.abort("r1")
    assert no_hit_reported(check_untracked(cache, ["r1"], "aborted"), "r1"), "F8: an aborted prefetch reported a hit"
    assert cache.match(tokens) == (0, 0), "F8: an aborted prefetch left data in the tree"
    held.release()
    close_and_check_trace(cache, trace, config, host_slots_left=0)


@pytest.mark.clause("F8", "F5", "S1", "S3", "S5")
@pytest.mark.parametrize("policy", ["best_effort", "wait_complete", "timeout"])
def test_prefetch_again_after_abort_serves_the_stored_bytes(impl, make_cache, trace, gate, policy, page_size):
    """The aborted operation's late IO must not touch the slots of the next prefetch of the same tokens."""
    cache, config = make(make_cache, policy)
    tokens, data = stored_request(cache, seed=33, pages=PAGES, page_size=page_size)
    held = gate.hold("first KV batch of the aborted prefetch", io_start("kv", op="r1"))
    assert cache.prefetch("r1", tokens) == len(tokens)
    held.wait_reached()
    cache.abort("r1")
    # A new id: the trace names operations by request id, unique per prefetch.
    assert cache.prefetch("r2", tokens) == len(tokens), "F8: after the abort its tokens must be prefetchable again"
    held.release()
    cache.wait_prefetch_io("r2")
    assert_whole_commit(drive(cache, ["r2"], trace=trace), "r2", len(tokens), "the new prefetch found every page")
    served(cache, tokens, data, len(tokens))
    close_and_check_trace(cache, trace, config)


# --- F8: no phantom hits ----------------------------------------------------------------

@pytest.mark.clause("F8", "X4")
@pytest.mark.parametrize("policy", ["best_effort", "wait_complete", "timeout"])
def test_no_hit_for_a_prefetch_that_was_never_queued(impl, make_cache, trace, policy, page_size):
    cache, config = make(make_cache, policy)
    tokens, _ = stored_request(cache, seed=34, pages=PAGES, page_size=page_size)
    assert no_hit_reported(check_untracked(cache, ["never-started"], "never started"), "never-started"), \
        "F8: a request with no prefetch reported a hit"
    short = tokens[: page_size - 1]  # less than a page: nothing to prefetch
    assert cache.prefetch("short", short) == 0, "a prefetch shorter than one page must not be queued"
    assert no_hit_reported(check_untracked(cache, ["short"], "never queued"), "short"), "F8: a prefetch that was never queued reported a hit"
    assert cache.match(tokens) == (0, 0), "F8: nothing was committed, yet the tree serves tokens"
    close_and_check_trace(cache, trace, config, host_slots_left=0)


# --- F7: a short hit in a side pool revokes ------------------------------------------------

@pytest.mark.clause("F7", "F3", "F11", "S2", "S3")
@pytest.mark.parametrize("policy", ["best_effort", "wait_complete", "timeout"])
@pytest.mark.needs("pool:indexer", "default_pool:indexer")
def test_short_side_pool_hit_revokes(impl, make_cache, trace, tmp_path, policy, page_size):
    storage = tmp_path / "f7-storage"
    cache, config = make(make_cache, policy, storage_dir=storage, threshold_pages=2)
    tokens = request_tokens(35, PAGES * page_size)
    data = request_data(cache, tokens, 35)
    # Page 1 alone first, so the later pages' indexer files are told apart.
    store(cache, tokens[:page_size], {k: (v if cache.pools[k].unit == "state" else v[:page_size]) for k, v in data.items()})
    head = pool_files(storage, "indexer", trace)
    store(cache, tokens, data)
    remove_files(pool_files(storage, "indexer", trace) - head)  # KV hits 4 pages, the indexer 1 (< 2)
    assert cache.prefetch("r1", tokens) == len(tokens)
    cache.wait_prefetch_io("r1")
    assert op_events(trace, "r1", EventKind.REVOKE), "F7: a 1-page hit in an ALL_PAGES pool under a 2-page threshold must revoke"
    assert cache.check_progress(["r1"]) == {"r1": 0}, "F7: a revoked prefetch must end at the first check, committing nothing"
    loads = [e for e in op_events(trace, "r1", EventKind.IO_START) if e.value == LOAD]
    assert not loads, f"F7: a prefetch revoked by its hit query started {len(loads)} transfers"
    assert cache.match(tokens) == (0, 0), "F8: a revoked prefetch left data in the tree"
    close_and_check_trace(cache, trace, config, host_slots_left=0)


# --- F4: a trailing state missing in storage is dropped ----------------------------------------

@pytest.mark.clause("F4", "F3", "F11", "S3", "S5")
@pytest.mark.parametrize("policy", ["best_effort", "wait_complete", "timeout"])
@pytest.mark.needs("pool:mamba", "default_pool:mamba")
def test_trailing_state_missing_in_storage_is_dropped(impl, make_cache, trace, gate, tmp_path, policy, page_size):
    storage = tmp_path / "f4-storage"
    cache, config = make(make_cache, policy, storage_dir=storage)
    tokens, data = stored_request(cache, seed=36, pages=PAGES, page_size=page_size)
    held = gate.hold("first KV batch", io_start("kv"))
    assert cache.prefetch("r1", tokens) == len(tokens)
    held.wait_reached()
    assert remove_files(pool_files(storage, "mamba", trace)), "test setup: no mamba state was stored"
    held.release()
    cache.wait_prefetch_io("r1")
    done = drive(cache, ["r1"], trace=trace)
    # Dropping the loaded KV with the state is safe (nothing wrong is attached: F4's part, below), and short (F11's).
    assert done == {"r1": len(tokens)}, f"F11: KV and every ALL_PAGES pool loaded, so all {len(tokens)} tokens commit without the state (got {done})"
    inserted = [e for e in op_events(trace, "r1", EventKind.INSERT) if e.pool == "mamba"]
    assert not inserted, "F4: a state whose load missed was attached"
    loaded = cache.load_back(tokens)
    assert "mamba" not in loaded.data, "F4: load-back served a mamba state that was never loaded for this length"
    assert_loaded_bytes(cache, loaded, data, len(tokens))
    close_and_check_trace(cache, trace, config)


# --- F4 / S3: two prefetches of one prefix ------------------------------------------------------

def prefetch_one_prefix_twice(make_cache, trace, policy: str, seed: int) -> None:
    """Two prefetches of one stored prefix, both loaded before either commits: both commit it whole, the second over the first."""
    cache, config = make(make_cache, policy)
    tokens, data = stored_request(cache, seed=seed, pages=PAGES, page_size=make_cache.page_size)
    first = cache.prefetch("r1", tokens)
    assert first == len(tokens), f"F8: a prefetch of {len(tokens)} stored tokens requested {first}"
    second = cache.prefetch("r2", tokens)
    if second == 0:
        pytest.skip("not applicable: the implementation declines a second prefetch of a prefix already in flight, so no commit lands over another")
    assert second == len(tokens), f"F8: a second prefetch of {len(tokens)} stored tokens requested {second}"
    for request_id in ("r1", "r2"):
        cache.wait_prefetch_io(request_id)
    done = drive(cache, ["r1", "r2"], trace=trace)
    for request_id in ("r1", "r2"):
        assert_whole_commit(done, request_id, len(tokens), "both prefetches loaded every page")
    served(cache, tokens, data, len(tokens))
    cache.evict_all()  # the tree lets go of everything: a slot it lost track of stays allocated
    close_and_check_trace(cache, trace, config, host_slots_left=0)


@pytest.mark.clause("F8", "S3", "S5")
@pytest.mark.parametrize("policy", ["best_effort", "wait_complete"])
def test_two_prefetches_of_one_prefix_keep_one_copy(impl, make_cache, trace, policy):
    """The second's pages are already in the tree: its slots are duplicates, released and freed once."""
    prefetch_one_prefix_twice(make_cache, trace, policy, seed=40)


@pytest.mark.clause("F4", "F8", "S3", "S5")
@pytest.mark.parametrize("policy", ["best_effort", "wait_complete"])
@pytest.mark.needs("pool:mamba", "default_pool:mamba")
def test_two_prefetches_of_one_prefix_leave_one_state(impl, make_cache, trace, policy):
    """The second finds the node already carrying a state, so its own state must be released."""
    prefetch_one_prefix_twice(make_cache, trace, policy, seed=39)


# --- S5 / S3: a host state pool under pressure ---------------------------------------------------

@pytest.mark.clause("S5", "S3", "F8")
@pytest.mark.needs("pool:mamba", "default_pool:mamba")
def test_a_full_host_state_pool_serves_each_prefix_its_own_state(impl, make_cache, trace, page_size):
    """More prefixes than the state pools hold, each with its own state: host state eviction must run.

    Whatever a prefix still matches afterwards loads its own bytes and, where a
    state is served, the state written at exactly that length; the newest
    prefix, just written, is served whole.
    """
    config = TerminationConfig(policy="wait_complete", page_size=page_size)
    # Two device state slots, and a host state pool the adapter sizes from them: a dozen prefixes overflow both.
    cache = make_cache(termination=config, batch_pages=BATCH, state_slots=2)
    prefixes = []
    for seed in range(50, 62):
        tokens = request_tokens(seed, 2 * page_size)
        data = request_data(cache, tokens, seed)
        cache.write(tokens, data)
        cache.flush()
        prefixes.append((tokens, data))
    for tokens, data in reversed(prefixes):  # newest first: load-back's own evictions then reach only the older ones
        loaded = cache.load_back(tokens)
        assert_loaded_bytes(cache, loaded, data, len(tokens))
        if tokens is prefixes[-1][0]:
            if loaded.tokens != len(tokens) or "mamba" not in loaded.data:
                assert_no_violations(trace.trace(), config)  # a clause the trace shows broken is the cause: named first
            assert loaded.tokens == len(tokens) and "mamba" in loaded.data, (
                f"test setup: the prefix written last loads {loaded.tokens} of {len(tokens)} tokens"
                f"{'' if 'mamba' in loaded.data else ' without its state'}, so no state's bytes are compared"
            )
    close_and_check_trace(cache, trace, config)


def state_backup(e) -> bool:
    return e.kind is EventKind.IO_START and e.value == BACKUP and e.pool == "mamba"


def host_state_evicted(e) -> bool:
    return e.kind is EventKind.FREE and e.pool == "mamba" and e.space == HOST and e.op is None


@pytest.mark.clause("S3", "F9", "S5")
@pytest.mark.needs("pool:mamba", "default_pool:mamba")
def test_host_state_eviction_spares_a_state_its_backup_reads(impl, make_cache, trace, gate, page_size):
    """A full host state pool evicts while one prefix's storage backup is held, that prefix least recently used.

    Under write_back a device tier of two prefixes backs its prefixes up to
    the host as later ones push them out. Every state in the host pool but the
    held one is idle (backed up to storage, then matched again), so eviction
    has a free choice: it must pass over the state the held backup still
    reads. Freed under the backup, the slot goes to the next prefix's state
    and the backup stores those bytes under the held prefix's key.
    """
    config = TerminationConfig(policy="wait_complete", page_size=page_size)
    cache = make_cache(termination=config, batch_pages=BATCH, state_slots=2, device_pages=4, write_policy="write_back")
    earlier = []
    for seed in range(90, 102):  # until host state eviction has run: the host state pool is full
        tokens = request_tokens(seed, 2 * page_size)
        cache.write(tokens, request_data(cache, tokens, seed))
        cache.flush()
        earlier.append(tokens)
        if any(host_state_evicted(e) for e in trace.trace().events):
            break
    held = gate.hold("the storage backup of the held prefix's state", state_backup)
    prefixes = []
    for seed in (102, 103):  # the second pushes the first to the host, whose storage backup is held
        tokens = request_tokens(seed, 2 * page_size)
        prefixes.append((tokens, request_data(cache, tokens, seed)))
        cache.write(*prefixes[-1])
    held.wait_reached()
    for tokens in earlier:  # every other host state is now more recent than the held one
        cache.match(tokens)
    pusher = request_tokens(104, 2 * page_size)
    cache.write(pusher, request_data(cache, pusher, 104))  # pushes the second to the host: its state needs a slot
    held.release()
    cache.flush()
    assert_no_violations(trace.trace(), config)  # a slot freed under the backup (S3) is the cause of what load-back sees
    cache.evict_all()
    for index, (tokens, data) in enumerate(prefixes):
        request_id = f"r{index}"
        if cache.prefetch(request_id, tokens):
            cache.wait_prefetch_io(request_id)
            drive(cache, [request_id], trace=trace)
        assert_loaded_bytes(cache, cache.load_back(tokens), data, len(tokens))
    close_and_check_trace(cache, trace, config)


# --- F9: no free under a pending copy ------------------------------------------------------------

def require_held_copies(impl, device: str) -> None:
    if device != "cpu":
        pytest.skip(f"copies are held on the CPU copy stream; on {device} the copy stream cannot be paused by a gate")


def write_back_copy(e) -> bool:
    return e.kind is EventKind.IO_START and e.value == WRITE_BACK_COPY and e.space == HOST


@pytest.mark.clause("F9", "S3", "S5")
@pytest.mark.needs("held_copies")
def test_duplicate_write_frees_nothing_a_held_copy_reads(impl, make_cache, trace, gate, device, page_size):
    """A duplicate prefix inserted while the first copy's backup is held: de-duplication frees only idle slots."""
    require_held_copies(impl, device)
    config = TerminationConfig(policy="wait_complete", page_size=page_size)
    # Device room for exactly two requests: a wrongly freed slot is handed straight to the next one.
    cache = make_cache(termination=config, batch_pages=BATCH, device_pages=2 * PAGES)
    tokens_a = request_tokens(37, PAGES * page_size)
    tokens_b = request_tokens(38, PAGES * page_size)
    data_a, data_b = request_data(cache, tokens_a, 37), request_data(cache, tokens_b, 38)
    held = gate.hold("backup copy of A", write_back_copy)
    cache.write(tokens_a, data_a)
    held.wait_reached()
    cache.write(tokens_a, data_a)  # the same prefix again: its new slots are duplicates
    cache.write(tokens_b, data_b)
    held.release()
    cache.flush()
    late = frees_left_for_later(cache)
    assert late is None, late
    cache.evict_all()
    for request_id, tokens, data in (("a", tokens_a, data_a), ("b", tokens_b, data_b)):
        assert cache.prefetch(request_id, tokens) == len(tokens)
        cache.wait_prefetch_io(request_id)
        assert drive(cache, [request_id], trace=trace) == {request_id: len(tokens)}
        served(cache, tokens, data, len(tokens))
    close_and_check_trace(cache, trace, config)


@pytest.mark.clause("F9", "S1", "S3", "S5")
@pytest.mark.needs("held_copies")
def test_prefetch_commit_over_a_node_whose_backup_copy_is_held(impl, make_cache, trace, gate, device, page_size):
    """The tree gains the same prefix (its host copy still pending) while the prefetch loads: the commit's de-duplication waits for the copy."""
    require_held_copies(impl, device)
    config = TerminationConfig(policy="wait_complete", page_size=page_size)
    cache = make_cache(termination=config, batch_pages=BATCH)
    tokens, data = stored_request(cache, seed=39, pages=PAGES, page_size=page_size)
    loading = gate.hold("first KV batch", io_start("kv"))
    assert cache.prefetch("r1", tokens) == len(tokens)
    loading.wait_reached()
    copying = gate.hold("backup copy of the same prefix", write_back_copy)
    cache.write(tokens, data)
    copying.wait_reached()
    loading.release()
    cache.wait_prefetch_io("r1")
    done = drive(cache, ["r1"], trace=trace)
    assert "r1" in done, "L1: the prefetch ended its IO and must finish"
    copying.release()
    cache.flush()
    late = frees_left_for_later(cache)
    assert late is None, late
    served(cache, tokens, data, len(tokens))
    cache.evict_all()
    assert cache.prefetch("r2", tokens) == len(tokens)
    cache.wait_prefetch_io("r2")
    assert drive(cache, ["r2"], trace=trace) == {"r2": len(tokens)}
    served(cache, tokens, data, len(tokens))
    close_and_check_trace(cache, trace, config)
