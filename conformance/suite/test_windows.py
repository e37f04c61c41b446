"""Deterministic races: the upstream bug, windows W1-W5 and the short sidecar (P6).

Each test holds a transfer (an IO_START the implementation gates) or the
scheduler at its vote, drives the interleaving that upstream gets wrong,
then checks the whole recorded trace against the spec's invariants, the
commit against the fence oracle (conformance/scenarios/races.py), and the loaded-back
bytes against the data the harness generated itself.
"""

from __future__ import annotations

import pytest

from conformance.scenarios.races import Background, SchedulerPointRecorder, all_pages_extra_pools, assert_commit_within_fence, close_and_check_trace, io_start, op_events, pool_files, remove_files, served, stored_request, vote_of

from conformance.oracles.outcome import trailing_pools
from conformance.scenarios.schedule_model import EXTRAS_WITH_EACH_BATCH, adapter_io_order
from conformance.scenarios.workload import checked_progress, drive, pass_deadline, request_data, request_tokens, store
from spec.config import TerminationConfig
from spec.trace import EventKind, TraceRecorder

PAGES = 4  # pages per request: two KV batches of two pages
BATCH = 2
# Each pool param is collected only for adapters running with that pool.
EXTRA_POOLS = [pytest.param(p, marks=pytest.mark.needs(f"pool:{p}", f"default_pool:{p}")) for p in ("indexer", "mamba")]


@pytest.fixture
def trace(clock, profile):
    # Also gates VOTE: a test can hold the scheduler between its vote and its terminate.
    return SchedulerPointRecorder(clock, profile=profile.id)


def make(make_cache, policy: str, **env):
    config = TerminationConfig(policy=policy, page_size=make_cache.page_size)
    return make_cache(termination=config, batch_pages=BATCH, **env), config


def extra_cache(impl, make_cache, policy: str, pool: str):
    cache, config = make(make_cache, policy)
    assert pool in cache.pools, f"test setup: {impl.name} declares {pool} among its default extra pools, yet its cache runs without it"
    return cache, config


# --- the upstream bug: KV complete, extra-pool get still running, scheduler checks --

@pytest.mark.clause("D3", "D4", "D5", "L1", "S1", "S5")
@pytest.mark.parametrize("pool", EXTRA_POOLS)
@pytest.mark.parametrize("policy", ["wait_complete", "timeout"])
def test_no_termination_while_extra_get_runs(impl, make_cache, trace, gate, policy, pool, profile, page_size):
    cache, config = extra_cache(impl, make_cache, policy, pool)
    tokens, data = stored_request(cache, seed=11, pages=PAGES, page_size=page_size)
    held = gate.hold(f"{pool} get", io_start(pool))
    assert cache.prefetch("r1", tokens) == len(tokens)
    held.wait_reached()
    for _ in range(3):
        assert cache.check_progress(["r1"]) == {}, f"{profile.counterpart('D3')}: {policy} stopped waiting while the {pool} get was still running (KV complete, pool transfers pending)"
    held.release()
    cache.wait_prefetch_io("r1")
    assert cache.check_progress(["r1"]) == {"r1": len(tokens)}, f"L1: the first check after every IO ended must commit the whole hit ({len(tokens)} tokens)"
    served(cache, tokens, data, len(tokens))
    close_and_check_trace(cache, trace, config)


# --- W1: best_effort skips the guard; the fence must not -----------------------------

@pytest.mark.clause("D1", "F6", "F3", "F11", "F4", "F5", "S1", "S3")
@pytest.mark.parametrize("pool", EXTRA_POOLS)
def test_w1_best_effort_commit_excludes_running_extra_get(impl, make_cache, trace, gate, pool, profile, page_size):
    cache, config = extra_cache(impl, make_cache, "best_effort", pool)
    tokens, data = stored_request(cache, seed=12, pages=PAGES, page_size=page_size)
    held = gate.hold(f"{pool} get", io_start(pool))
    assert cache.prefetch("r1", tokens) == len(tokens)
    held.wait_reached()
    done = cache.check_progress(["r1"])
    assert "r1" in done, f"{profile.counterpart('D1')}: best_effort must stop waiting at the first check"
    # The scenario's own clause first: past the fence here is best_effort skipping it (F6), not a clamp gone short.
    if pool in all_pages_extra_pools(cache):
        assert done["r1"] == 0, f"F6: best_effort committed {done['r1']} tokens whose {pool} pages were still being written"
    committed = assert_commit_within_fence(trace, cache, "r1", done["r1"], page_size, config)
    if not all_pages_extra_pools(cache):
        assert committed == len(tokens), f"F4: with only a trailing state in flight, the whole KV hit ({len(tokens)} tokens) is committed without it"
    held.release()
    served(cache, tokens, data, committed)
    close_and_check_trace(cache, trace, config)


# --- W2: under timeout, IO moves between the vote and the terminate --------------------

def vote_then_io_moves(cache, tokens, config, trace, gate, clock, *, pool: str | None, timed_out: bool, profile) -> tuple[dict, object]:
    """Hold the scheduler at its vote (no KV loaded yet), let KV finish and the next transfer start, then let it terminate.

    The next transfer, held until the caller releases it, is the `pool` get,
    or the second KV batch when pool is None.
    """
    first_kv = gate.hold("first KV batch", io_start("kv"))
    later = gate.hold(f"{pool} get" if pool else "second KV batch", io_start(pool) if pool else io_start("kv", nth=2, trace=trace))
    assert cache.prefetch("r1", tokens) == len(tokens)
    first_kv.wait_reached()
    if timed_out:
        pass_deadline(cache, clock, config, len(tokens) // config.page_size, ["r1"], profile)
    at_vote = gate.hold("scheduler at its vote", vote_of("r1"))
    checker = Background("check_progress(['r1'])", cache.check_progress, ["r1"])
    with checker.parked_at(gate):  # the scheduler thread must be back before teardown closes the cache
        vote = at_vote.wait_reached()
        clause = profile.counterpart("D5" if timed_out else "D1")
        assert vote.value is True, f"{clause}: the vote with nothing loaded{' past the deadline' if timed_out else ''} must be yes (it was {vote.value})"
        first_kv.release()
        later.wait_reached()  # KV moved on while the scheduler sat between vote and terminate
    at_vote.release()
    return checker.result(), later


@pytest.mark.clause("F1", "F2", "F3", "F11", "F5", "S1", "S2")
@pytest.mark.parametrize("pool", EXTRA_POOLS)
def test_w2_io_moves_between_vote_and_terminate(impl, make_cache, trace, gate, clock, pool, profile, page_size):
    cache, config = extra_cache(impl, make_cache, "timeout", pool)
    tokens, data = stored_request(cache, seed=13, pages=PAGES, page_size=page_size)
    done, later = vote_then_io_moves(cache, tokens, config, trace, gate, clock, pool=pool, timed_out=True, profile=profile)
    assert "r1" in done, "L2: past its deadline with a yes vote, the check must terminate the prefetch"
    committed = assert_commit_within_fence(trace, cache, "r1", done["r1"], page_size, config)
    later.release()
    served(cache, tokens, data, committed)
    close_and_check_trace(cache, trace, config)


# --- W3: a partial prefetch with an ALL_PAGES pool ------------------------------------

@pytest.mark.clause("F3", "F11", "F4", "F5", "S1", "S5")
@pytest.mark.parametrize("pools", ["default", "without_all_pages"])
@pytest.mark.parametrize("policy", ["best_effort", "timeout"])
def test_w3_partial_prefetch_commits_only_fully_loaded_pages(impl, make_cache, trace, gate, clock, tmp_path, policy, pools, profile, page_size):
    extra = impl.default_extra_pools
    if pools == "without_all_pages":
        # An ALL_PAGES pool loads after KV, so its clamp alone yields 0 here and would hide a commit past the KV pages.
        # A probe instance, on its own trace and storage, tells which default pools those are; the teardown closes it.
        probe = make_cache(policy, page_size, storage_dir=tmp_path / "probe-storage", trace=TraceRecorder(clock))
        clamping = set(all_pages_extra_pools(probe))
        extra = tuple(p for p in extra if p not in clamping)
        if not clamping:
            pytest.skip("the default extra pools have no ALL_PAGES pool: the default case is this one")
    cache, config = make(make_cache, policy, extra_pools=extra)
    tokens, data = stored_request(cache, seed=14, pages=PAGES, page_size=page_size)
    all_pages = all_pages_extra_pools(cache)
    if all_pages and adapter_io_order(impl) == EXTRAS_WITH_EACH_BATCH:
        # Each batch's ALL_PAGES pages load right after its KV: hold the first of them, KV's first batch landed.
        held = gate.hold(f"first {all_pages[0]} get", io_start(all_pages[0]))
    else:  # after all of KV: holding KV's second batch leaves the ALL_PAGES pool unread
        held = gate.hold("second KV batch", io_start("kv", nth=2, trace=trace))
    assert cache.prefetch("r1", tokens) == len(tokens)
    held.wait_reached()
    if policy == "timeout":
        pass_deadline(cache, clock, config, PAGES, ["r1"], profile)
    done = checked_progress(cache, ["r1"], trace)
    assert "r1" in done, f"{profile.counterpart('D1') if policy == 'best_effort' else 'L2'}: the partial prefetch must end at this check"
    committed = assert_commit_within_fence(trace, cache, "r1", done["r1"], page_size, config)
    if all_pages:
        assert committed == 0, f"F3: committed {committed} tokens of a partial prefetch whose {all_pages} get never ran"
    else:
        assert committed == BATCH * page_size, f"F3: a partial prefetch commits the KV pages that arrived ({BATCH * page_size} tokens), not {committed}"
    held.release()
    served(cache, tokens, data, committed)
    close_and_check_trace(cache, trace, config)


# --- W4: a revoked operation is terminated --------------------------------------------

@pytest.mark.clause("F7", "F8", "S2", "S3")
@pytest.mark.parametrize("policy", ["best_effort", "wait_complete", "timeout"])
def test_w4_revoked_prefetch_is_terminated(impl, make_cache, trace, policy, page_size):
    # Storage holds 2 of the 4 requested pages; 3 are needed: the hit query revokes.
    cache, config = make(make_cache, policy, threshold_pages=3)
    tokens = request_tokens(15, PAGES * page_size)
    data = request_data(cache, tokens, 15)
    half = 2 * page_size
    store(cache, tokens[:half], {k: (v if cache.pools[k].unit == "state" else v[:half]) for k, v in data.items()})
    assert cache.prefetch("r1", tokens) == len(tokens)
    cache.wait_prefetch_io("r1")
    revokes = op_events(trace, "r1", EventKind.REVOKE)
    assert revokes, "F7: a hit of 2 pages under a 3-page threshold must revoke the prefetch"
    assert cache.check_progress(["r1"]) == {"r1": 0}, "F7: a revoked prefetch must end at the first check, committing nothing"
    for vote in op_events(trace, "r1", EventKind.VOTE):
        if vote.state is not None and vote.seq > revokes[0].seq:
            assert vote.state.terminated and vote.state.pool_transfers_done, f"F7: after its revoke the scheduler saw {vote.state} (a revoked operation is terminated and done)"
    assert cache.match(tokens) == (0, 0), "F8: a revoked prefetch must leave nothing in the tree"
    close_and_check_trace(cache, trace, config, host_slots_left=0)


# --- W5: the commit uses the progress snapshot taken with the terminate --------------

@pytest.mark.clause("F2", "F1", "F3", "F11", "F5", "S1", "S2")
def test_w5_commit_uses_snapshot_taken_with_terminate(impl, make_cache, trace, gate, clock, profile, page_size):
    cache, config = make(make_cache, "best_effort")
    tokens, data = stored_request(cache, seed=16, pages=PAGES, page_size=page_size)
    extras = all_pages_extra_pools(cache) or trailing_pools(cache)
    done, later = vote_then_io_moves(cache, tokens, config, trace, gate, clock, pool=extras[0] if extras else None, timed_out=False, profile=profile)
    terminates = op_events(trace, "r1", EventKind.TERMINATE)
    assert len(terminates) == 1, f"F2: expected one terminate of r1, saw {len(terminates)}"
    committed = assert_commit_within_fence(trace, cache, "r1", done["r1"], page_size, config)
    later.release()
    served(cache, tokens, data, committed)
    close_and_check_trace(cache, trace, config)


# --- P6: the sidecar comes back shorter than KV ------------------------------------------

@pytest.mark.clause("F3", "F11", "S5", "L1", "S7")
@pytest.mark.parametrize("policy", ["best_effort", "wait_complete", "timeout"])
@pytest.mark.needs("pool:indexer", "default_pool:indexer")
def test_p6_short_sidecar_clamps_the_commit(impl, make_cache, trace, gate, tmp_path, policy, page_size):
    storage = tmp_path / "p6-storage"
    cache, config = make(make_cache, policy, storage_dir=storage)
    tokens = request_tokens(17, PAGES * page_size)
    data = request_data(cache, tokens, 17)
    kept = 2 * page_size
    # Stored in two steps, so the indexer pages of the last two pages are told apart by file alone.
    store(cache, tokens[:kept], {k: (v if cache.pools[k].unit == "state" else v[:kept]) for k, v in data.items()})
    head = pool_files(storage, "indexer", trace)
    store(cache, tokens, data)
    tail = pool_files(storage, "indexer", trace) - head
    assert len(tail) == PAGES - 2, f"test setup: expected {PAGES - 2} new indexer pages in storage, found {len(tail)}"
    first_kv = gate.hold("first KV batch (after the existence check)", io_start("kv"))
    assert cache.prefetch("r1", tokens) == len(tokens)
    first_kv.wait_reached()
    remove_files(tail)  # evicted in storage between the existence check and the get
    first_kv.release()
    cache.wait_prefetch_io("r1")
    done = drive(cache, ["r1"], trace=trace)
    committed = assert_commit_within_fence(trace, cache, "r1", done["r1"], page_size, config)
    assert committed <= kept, f"F3: the indexer came back with 2 of {PAGES} pages; the commit must be clamped to {kept} tokens, not {committed}"
    # The fence allowed no more (checked above): the intact pages read in the batch of a missing one were lost with it.
    assert committed == kept, (f"S7: the indexer came back with its first 2 of {PAGES} pages intact, yet only {committed} tokens "
                               f"loaded: a page missing at the get is a miss for itself and the pages after it, not for those before it")
    served(cache, tokens, data, committed)
    close_and_check_trace(cache, trace, config)
