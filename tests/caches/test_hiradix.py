"""HiRadixCache end to end (storage round trip into a fresh cache) and its decision, state by state."""

from __future__ import annotations


import pytest

from conformance.bounds import WAIT_S
from caches.config import CacheConfig
from caches.hiradix import HiRadixCache
from conformance.implementations import devices
from conformance.oracles.outcome import same_bytes
from conformance.scenarios.workload import random_rows
from spec import check
from spec.clock import ManualClock
from spec.config import Policy
from spec.decision import decide, enumerate_states, local_vote
from spec.errors import ConfigError
from spec.timeout import timeout_budget
from spec.trace import EventKind, TraceRecorder

PS = 4


def make_config(tmp_path, device: str = "cpu", **overrides) -> CacheConfig:
    fields = dict(
        page_size=PS, device=device, device_pages=32, host_pages=32, kv_elem_shape=(2, 3), indexer_elem_shape=(5,),
        dtype="bfloat16", extra_pools=("indexer",), storage_path=str(tmp_path / "store"), storage_batch_pages=2,
        prefetch_policy="wait_complete", wait_timeout_s=WAIT_S,
    )
    fields.update(overrides)
    return CacheConfig(**fields)


@pytest.fixture
def open_caches(cache_factory):
    """open_caches(config, **kwargs) -> a HiRadixCache, ended by the one factory."""
    return lambda config, **kwargs: cache_factory.adopt(HiRadixCache(config, **kwargs))


@pytest.mark.parametrize("device", devices.pytest_params())
@pytest.mark.parametrize("policy", ["best_effort", "wait_complete", "timeout"])
def test_round_trip_through_files_into_a_fresh_cache_is_byte_exact(tmp_path, open_caches, device, policy):
    """S5 end to end: write, back up, evict everything; a new cache over the same files loads the same bytes."""
    config = make_config(tmp_path, devices.torch_device(device), prefetch_policy=policy)
    writer_trace = TraceRecorder(ManualClock(0.0))
    writer = open_caches(config, trace=writer_trace, clock=ManualClock(0.0))
    shared = [7_000 + i for i in range(3 * PS)]
    requests = {
        "a": shared + [8_000 + i for i in range(2 * PS)],
        "b": shared + [9_000 + i for i in range(4 * PS)] + [1, 2],  # a partial last page is never stored
    }
    data = {}
    for seed, (rid, tokens) in enumerate(requests.items()):
        rows = len(tokens)
        data[rid] = {spec.name: random_rows(rows, spec.elem_shape, spec.dtype, seed * 10 + i) for i, spec in enumerate(writer.specs)}
        if rid == "b":  # the shared prefix carries a's bytes (the tree keeps the first write)
            for pool in data[rid]:
                data[rid][pool][: len(shared)] = data["a"][pool][: len(shared)]
        writer.write(tokens, data[rid])
    writer.flush()
    writer.evict_all()
    assert writer.tree.device_tokens() == writer.tree.host_tokens() == 0
    writer.close()
    assert check(writer_trace.trace(), config.termination) == []

    clock = ManualClock(50.0)
    trace = TraceRecorder(clock)
    reader = open_caches(config, trace=trace, clock=clock)
    for rid, tokens in requests.items():
        full = len(tokens) - len(tokens) % PS
        # b's shared prefix is already on the device, loaded back for a.
        assert reader.match_prefix(tokens).device_hit_tokens == (len(shared) if rid == "b" else 0)
        requested = reader.prefetch_from_storage(rid, tokens)
        assert requested == full - (len(shared) if rid == "b" else 0)  # b only fetches beyond a's pages
        reader.wait_prefetch_io(rid)
        assert reader.check_prefetch_progress([rid]) == {rid: requested}
        m = reader.match_prefix(tokens)
        assert m.host_hit_tokens == full - m.device_hit_tokens
        assert reader.load_back(m.host_node) is not None
        m = reader.match_prefix(tokens)
        assert m.device_hit_tokens == full
        loaded = reader.read_device(m.device_slots)
        for pool in ("kv", "indexer"):
            assert same_bytes(loaded[pool], data[rid][pool][:full]), f"{rid}: {pool} bytes differ"
    assert reader.stats.storage_hit_tokens == reader.stats.loaded_back_tokens
    reader.close()
    assert check(trace.trace(), config.termination) == []
    load_backs = [e for e in trace.events() if e.kind is EventKind.LOAD_BACK]
    assert {e.pool for e in load_backs} == {"kv", "indexer"}


@pytest.mark.parametrize("policy", list(Policy), ids=str)
def test_can_terminate_prefetch_matches_the_spec_decision_in_every_state(tmp_path, open_caches, policy):
    """D1-D5, X1 on one rank: every state of spec.decision.enumerate_states, via a real operation."""
    clock = ManualClock(1000.0)
    trace = TraceRecorder(clock)
    config = make_config(tmp_path, prefetch_policy=policy.value, storage_backend="memory")
    cache = open_caches(config, trace=trace, clock=clock)
    states = [s for s in enumerate_states(PS) if s.policy is policy]
    assert len(states) == 48
    for state in states:
        budget = timeout_budget(config.termination, state.hit_pages)
        start = clock.now() - budget - 1.0 if state.timed_out else clock.now()
        op = cache.make_probe_operation(state, start_time=start)
        before = len(trace.events())
        assert cache.can_terminate_prefetch(op) is decide([state]), state
        votes = [e for e in trace.events()[before:] if e.kind is EventKind.VOTE]
        assert len(votes) == 1, f"one vote per check: {state}"
        seen = votes[0].state
        assert votes[0].value is local_vote(state), state
        assert (seen.hit_pages, seen.completed_tokens, seen.pool_transfers_present, seen.pool_transfers_done, seen.terminated) == (
            state.hit_pages, state.completed_tokens, state.pool_transfers_present, state.pool_transfers_done, state.terminated)
        if policy is Policy.TIMEOUT:
            assert seen.timed_out is state.timed_out
    assert check(trace.trace(), config.termination, clauses=["D"]) == []


def test_timeout_is_strict_at_the_deadline(tmp_path, open_caches):
    """T1, T2: exactly at the budget it waits; one tick past, it stops (exact binary fractions)."""
    clock = ManualClock(1000.0)
    config = make_config(tmp_path, prefetch_policy="timeout", storage_backend="memory",
                         timeout_base_s=2.0, timeout_per_ki_token_s=0.5, timeout_max_s=30.0)
    cache = open_caches(config, trace=TraceRecorder(clock), clock=clock)
    state = next(s for s in enumerate_states(PS) if s.policy is Policy.TIMEOUT and s.hit_pages == 2 and s.completed_tokens == 0
                 and not s.timed_out and not s.pool_transfers_present and not s.terminated)
    budget = timeout_budget(config.termination, 2)
    assert budget == 2.0 + 0.5 * (2 * PS) / 1024
    op = cache.make_probe_operation(state, start_time=1000.0)
    clock.set(1000.0 + budget)
    assert cache.can_terminate_prefetch(op) is False
    clock.set(1000.0 + budget + 2.0 ** -20)
    assert cache.can_terminate_prefetch(op) is True


def test_hiradix_supports_only_the_indexer_pool(tmp_path):
    with pytest.raises(ConfigError) as err:
        HiRadixCache(make_config(tmp_path, extra_pools=("indexer", "mamba")))
    assert str(err.value) == "invalid extra_pools: ['mamba'] (accepted: hiradix supports extra pools: indexer)"


def test_a_check_over_an_untracked_request_joins_neutrally(tmp_path, open_caches):
    """X4 on one rank: an id this rank does not track is skipped without error."""
    cache = open_caches(make_config(tmp_path, storage_backend="memory"))
    assert cache.check_prefetch_progress(["unknown"]) == {}
    assert cache.check_prefetch_progress([]) == {}
