"""unified_radix: components (LRU, locks, match ends), the storage round trip, the protocol."""

from __future__ import annotations

import random

import pytest

import spec
from caches.config import CacheConfig
from caches.unified import ComponentLockError, FullAttention, Mamba
from caches.unified_radix import UnifiedRadixCache
from conformance.implementations import devices
from conformance.oracles.outcome import same_bytes
from conformance.scenarios.workload import pool_data
from spec.clock import ManualClock
from spec.decision import DecisionState, enumerate_states
from spec.errors import ConfigError
from spec.trace import TraceRecorder

PAGE = 4
POOL_SETS = [(), ("indexer",), ("mamba",), ("indexer", "mamba")]


def make_cache(factory, extra_pools=("mamba",), *, clock=None, trace=None, **fields) -> UnifiedRadixCache:
    """A UnifiedRadixCache over the factory's storage; the one factory checks its threads and background errors at the end."""
    values = dict(
        page_size=PAGE, device_pages=16, host_pages=32, state_device_slots=8, state_host_slots=8,
        kv_elem_shape=(2, 3), indexer_elem_shape=(5,), state_elem_shape=(7,),
        extra_pools=tuple(extra_pools), write_policy="write_through", prefetch_policy="wait_complete",
        storage_backend="file", storage_path=str(factory.storage_path), storage_batch_pages=2,
        wait_timeout_s=5.0,
    )
    values.update(fields)
    return factory.adopt(UnifiedRadixCache(CacheConfig(**values), clock=clock or ManualClock(1000.0), trace=trace))


def tokens_for(seed: int, count: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(1, 50_000) for _ in range(count)]


def assert_accounting_exact(cache: UnifiedRadixCache) -> None:
    """allocated + free == capacity, and the tree holds exactly what is allocated."""
    if not cache.closed:
        cache.flush()  # backups in flight hold host slots the tree does not list yet
    assert not cache.ongoing_prefetch
    accounting = cache.slot_accounting()
    for name, (allocated, free, capacity) in accounting.items():
        assert allocated + free == capacity, f"{name}: {allocated} + {free} != {capacity}"
    assert accounting["device:kv"][0] == cache.tree.device_tokens()
    assert accounting["host:kv"][0] == cache.tree.host_tokens()
    if cache.state_pools:
        refs = [ref for node in cache.tree.iter_nodes() for ref in cache.states(node).values()]
        assert accounting["device:state"][0] == sum(ref.device is not None for ref in refs)
        assert accounting["host:state"][0] == sum(ref.host is not None for ref in refs)


def drive(cache: UnifiedRadixCache, request_ids: list[str], max_steps: int = 20) -> dict[str, int]:
    finished: dict[str, int] = {}
    pending = list(request_ids)
    for _ in range(max_steps):
        if not pending:
            return finished
        finished.update(cache.check_prefetch_progress(pending))
        pending = [r for r in pending if r not in finished]
    raise AssertionError(f"prefetches {pending} did not finish within {max_steps} steps")


def node_at(cache: UnifiedRadixCache, tokens: list[int]):
    match = cache.tree.match_prefix(tokens)
    assert match.matched_tokens == len(tokens)
    return match.host_node


# --- construction ----------------------------------------------------------------

@pytest.mark.parametrize("pools", POOL_SETS, ids=lambda p: "+".join(("kv", *p)))
def test_components_follow_the_configured_pools(tmp_path, pools, cache_factory):
    with make_cache(cache_factory, pools, storage_backend="memory") as cache:
        full = cache.components["full_attention"]
        assert isinstance(full, FullAttention)
        assert full.pools == ("kv", "indexer") if "indexer" in pools else full.pools == ("kv",)
        assert ("mamba" in cache.components) == ("mamba" in pools)
        if "mamba" in pools:
            assert isinstance(cache.components["mamba"], Mamba) and cache.components["mamba"].pools == ("mamba",)
        with pytest.raises(ConfigError, match="component"):
            cache.component("sliding_window")


# --- end to end through storage ---------------------------------------------------

@pytest.mark.parametrize("device", devices.pytest_params())
@pytest.mark.parametrize("policy", ["wait_complete", "timeout"])
@pytest.mark.parametrize("pools", POOL_SETS, ids=lambda p: "+".join(("kv", *p)))
def test_roundtrip_through_file_storage_is_byte_exact(tmp_path, pools, policy, device, cache_factory):
    clock = ManualClock(1000.0)
    trace = TraceRecorder(clock)
    tokens = tokens_for(1, 6 * PAGE)
    with make_cache(cache_factory, pools, clock=clock, trace=trace, prefetch_policy=policy, device=devices.torch_device(device)) as writer:
        data = pool_data(writer.specs, len(tokens), seed=2)
        writer.write(tokens, data)
        writer.flush()
        writer.evict_all()
        assert writer.tree.device_tokens() == writer.tree.host_tokens() == 0
        assert_accounting_exact(writer)
    with make_cache(cache_factory, pools, clock=clock, trace=trace, prefetch_policy=policy, device=devices.torch_device(device)) as reader:
        assert reader.prefetch_from_storage("r1", tokens) == len(tokens)
        reader.wait_prefetch_io("r1")
        assert drive(reader, ["r1"]) == {"r1": len(tokens)}
        match = reader.match_prefix(tokens)
        assert (match.device_hit_tokens, match.host_hit_tokens) == (0, len(tokens))
        assert reader.load_back(match.host_node) is not None
        match = reader.match_prefix(tokens)
        assert (match.device_hit_tokens, match.host_hit_tokens) == (len(tokens), 0)
        loaded = reader.read_device(match.device_slots, state_node=match.device_node)
        assert sorted(loaded) == sorted(data)
        for pool, want in data.items():
            assert same_bytes(loaded[pool], want), f"pool {pool}: loaded bytes differ"
        assert_accounting_exact(reader)
    assert spec.check(trace.trace(), reader.termination) == []


# --- component locks and LRU ------------------------------------------------------

def test_a_component_lock_blocks_device_eviction(tmp_path, cache_factory):
    with make_cache(cache_factory, ("indexer", "mamba"), storage_backend="memory") as cache:
        head, tail = tokens_for(3, 2 * PAGE), tokens_for(4, 2 * PAGE)
        cache.write(head, pool_data(cache.specs, len(head), 5))
        cache.write(head + tail, pool_data(cache.specs, len(head + tail), 6))
        cache.flush()
        head_node, tail_node = node_at(cache, head), node_at(cache, head + tail)
        full, mamba = cache.components["full_attention"], cache.components["mamba"]

        # FullAttention's lock covers the prefix: nothing on the path can go.
        full.lock(tail_node)
        assert cache.evict(cache.tree.device_tokens()) == 0
        full.unlock(tail_node)

        # Mamba's lock covers its node only: the tail goes, the locked head stays.
        mamba.lock(head_node)
        assert cache.evict(cache.tree.device_tokens()) == len(tail)
        assert tail_node.value is None and head_node.value is not None
        assert cache.states(head_node)["mamba"].device is not None
        mamba.unlock(head_node)
        assert cache.evict(cache.tree.device_tokens()) == len(head)
        assert head_node.value is None
        with pytest.raises(ComponentLockError, match="below zero"):
            mamba.unlock(head_node)
        assert_accounting_exact(cache)


def test_mamba_host_eviction_drops_states_by_its_own_lru_and_keeps_kv(tmp_path, cache_factory):
    with make_cache(cache_factory, ("mamba",), storage_backend="memory") as cache:
        older, newer = tokens_for(7, 2 * PAGE), tokens_for(8, 2 * PAGE)
        for seed, tokens in enumerate((older, newer)):
            cache.write(tokens, pool_data(cache.specs, len(tokens), seed))
        cache.flush()
        cache.evict(cache.tree.device_tokens())
        older_node, newer_node = node_at(cache, older), node_at(cache, newer)
        cache.match_prefix(older)  # now the more recent of the two for every component
        mamba = cache.components["mamba"]
        assert mamba.lru_order() == [newer_node.id, older_node.id]
        host_tokens = cache.tree.host_tokens()

        assert cache.evict_component_host("mamba", 1) == 1
        assert cache.states(newer_node)["mamba"].host is None
        assert cache.states(older_node)["mamba"].host is not None
        assert cache.tree.host_tokens() == host_tokens and newer_node.host_value is not None
        assert mamba.lru_order() == [older_node.id]
        # KV without its state is no usable end for Mamba: the match truncates.
        assert cache.match_prefix(newer).matched_tokens == 0
        assert cache.match_prefix(older).host_hit_tokens == len(older)

        # A pinned state stays.
        mamba.pin_host(older_node)
        assert cache.evict_component_host("mamba", 1) == 0
        mamba.unpin_host(older_node)
        assert_accounting_exact(cache)

        # FullAttention's host eviction is the tree's: nodes leave with every component's data.
        assert cache.evict_component_host("full_attention", host_tokens) == host_tokens
        assert cache.tree.node_count() == 0
        assert mamba.lru_order() == [] and cache.components["full_attention"].lru_order() == []
        assert_accounting_exact(cache)


def test_host_state_pressure_drops_a_mamba_state_before_any_kv(tmp_path, cache_factory):
    with make_cache(cache_factory, ("mamba",), storage_backend="memory", state_host_slots=2) as cache:
        requests = [tokens_for(10 + i, 2 * PAGE) for i in range(3)]
        for seed, tokens in enumerate(requests):
            cache.write(tokens, pool_data(cache.specs, len(tokens), seed))
            cache.flush()
        nodes = [node_at(cache, tokens) for tokens in requests]
        assert all(node.host_value is not None for node in nodes)  # every KV backup kept
        assert [cache.states(node)["mamba"].host is not None for node in nodes] == [False, True, True]
        assert_accounting_exact(cache)


def test_lru_follows_insert_and_match_and_forgets_deleted_nodes(tmp_path, cache_factory):
    with make_cache(cache_factory, ("mamba",), storage_backend="memory", write_policy="write_back") as cache:
        first, second = tokens_for(20, PAGE), tokens_for(21, PAGE)
        cache.write(first, pool_data(cache.specs, PAGE, 1))
        cache.write(second, pool_data(cache.specs, PAGE, 2, states=False))
        a, b = node_at(cache, first), node_at(cache, second)
        assert cache.components["full_attention"].lru_order() == [a.id, b.id]
        assert cache.components["mamba"].lru_order() == [a.id]  # b carries no state
        cache.match_prefix(first)
        assert cache.components["full_attention"].lru_order() == [b.id, a.id]
        cache.tree.evict(cache.tree.device_tokens(), on_demote=cache.eviction.drop_device, on_delete=cache.eviction.drop_device)
        assert cache.tree.node_count() == 0
        assert cache.components["full_attention"].lru_order() == []
        assert cache.components["mamba"].lru_order() == []
        assert_accounting_exact(cache)


# --- matching ---------------------------------------------------------------------

def test_match_ends_at_the_deepest_node_with_a_state(tmp_path, cache_factory):
    with make_cache(cache_factory, ("indexer", "mamba"), storage_backend="memory") as cache:
        ab, c = tokens_for(30, 4 * PAGE), tokens_for(31, 2 * PAGE)
        ab_data = pool_data(cache.specs, len(ab), 1)
        cache.write(ab, ab_data)
        cache.write(ab + c, pool_data(cache.specs, len(ab + c), 2, states=False))

        deeper = cache.match_prefix(ab + c)  # c has no state: the match stops at ab
        assert (deeper.device_hit_tokens, deeper.host_hit_tokens, deeper.matched_tokens) == (len(ab), 0, len(ab))
        assert deeper.device_node is deeper.host_node is node_at(cache, ab)
        loaded = cache.read_device(deeper.device_slots, state_node=deeper.device_node)
        assert same_bytes(loaded["mamba"], ab_data["mamba"])
        assert same_bytes(loaded["kv"], ab_data["kv"])

        half = cache.match_prefix(ab[: 2 * PAGE])  # splits ab: the head carries no state
        assert half.matched_tokens == 0 and half.device_hit_tokens == 0
        assert half.device_node is cache.tree.root
        assert cache.match_prefix(ab).matched_tokens == len(ab)  # the tail kept the state
        assert_accounting_exact(cache)


def test_a_host_end_with_a_state_loads_back_under_a_device_node_without_one(tmp_path, cache_factory):
    with make_cache(cache_factory, ("mamba",), storage_backend="memory") as cache:
        a, bc, d = tokens_for(40, 2 * PAGE), tokens_for(41, 4 * PAGE), tokens_for(42, 2 * PAGE)
        abc_data = pool_data(cache.specs, len(a + bc), 1)
        cache.write(a + bc, abc_data)
        cache.write(a + d, pool_data(cache.specs, len(a + d), 2))  # splits: a carries no state
        cache.flush()
        assert cache.evict(len(bc)) == len(bc)  # the least recent leaf: bc
        bc_node = node_at(cache, a + bc)
        assert bc_node.value is None and cache.states(bc_node)["mamba"].host is not None

        match = cache.match_prefix(a + bc)
        assert (match.device_hit_tokens, match.host_hit_tokens) == (len(a), len(bc))
        assert match.host_node is bc_node
        assert cache.load_back(match.host_node) is not None
        match = cache.match_prefix(a + bc)
        assert (match.device_hit_tokens, match.host_hit_tokens) == (len(a + bc), 0)
        loaded = cache.read_device(match.device_slots, state_node=match.device_node)
        assert same_bytes(loaded["kv"], abc_data["kv"]) and same_bytes(loaded["mamba"], abc_data["mamba"])
        assert all(c.data(bc_node).lock_ref == 0 for c in cache.components.values())  # load-back unlocked
        assert_accounting_exact(cache)


def test_kv_only_matches_any_page_boundary(tmp_path, cache_factory):
    with make_cache(cache_factory, (), storage_backend="memory") as cache:
        tokens = tokens_for(50, 4 * PAGE)
        cache.write(tokens, pool_data(cache.specs, len(tokens), 1))
        assert cache.match_prefix(tokens[: 2 * PAGE + 1]).device_hit_tokens == 2 * PAGE
        assert_accounting_exact(cache)


# --- prefetch pins and teardown ------------------------------------------------------

def test_a_prefetch_pins_the_node_it_extends_until_it_commits(tmp_path, cache_factory):
    tokens = tokens_for(60, 4 * PAGE)
    with make_cache(cache_factory, ("mamba",)) as writer:
        writer.write(tokens, pool_data(writer.specs, len(tokens), 1))
        writer.flush()
    with make_cache(cache_factory, ("mamba",)) as reader:
        root = reader.tree.root
        assert reader.prefetch_from_storage("r1", tokens) == len(tokens)
        assert all(c.data(root).host_ref == 1 for c in reader.components.values())
        reader.wait_prefetch_io("r1")
        assert drive(reader, ["r1"]) == {"r1": len(tokens)}
        assert all(c.data(root).host_ref == 0 for c in reader.components.values())
        assert reader.match_prefix(tokens).host_hit_tokens == len(tokens)
        assert_accounting_exact(reader)


def test_close_stops_every_thread_and_returns_every_slot(tmp_path, cache_factory):
    tokens = tokens_for(70, 4 * PAGE)
    with make_cache(cache_factory, ("indexer", "mamba")) as writer:
        writer.write(tokens, pool_data(writer.specs, len(tokens), 1))
        writer.flush()
    reader = make_cache(cache_factory, ("indexer", "mamba"))
    assert reader.prefetch_from_storage("r1", tokens) == len(tokens)
    threads = reader.threads()
    assert threads and all(t.is_alive() for t in threads)
    reader.close()  # aborts the prefetch still in flight
    assert [t.name for t in threads if t.is_alive()] == []
    assert_accounting_exact(reader)
    assert reader.tree.host_tokens() == 0


def test_check_progress_rejects_a_bare_string_and_joins_untracked_ids(tmp_path, cache_factory):
    with make_cache(cache_factory, (), storage_backend="memory") as cache:
        with pytest.raises(ConfigError, match="request_ids"):
            cache.check_prefetch_progress("r1")
        assert cache.check_prefetch_progress(["gone"]) == {}


# --- the protocol -----------------------------------------------------------------------

def _probe_start(cache: UnifiedRadixCache, state: DecisionState) -> float:
    budget = spec.timeout_budget(cache.termination, state.hit_pages)
    return cache.clock.now() - (budget + 1.0 if state.timed_out else 0.0)


@pytest.mark.parametrize("policy", ["best_effort", "wait_complete", "timeout"])
def test_every_decision_matches_the_spec(tmp_path, policy, cache_factory):
    clock = ManualClock(1000.0)
    trace = TraceRecorder(clock)
    with make_cache(cache_factory, (), storage_backend="memory", prefetch_policy=policy, clock=clock, trace=trace) as cache:
        states = [s for s in enumerate_states(PAGE) if s.policy.value == policy]
        assert states
        for state in states:
            op = cache.make_probe_operation(state, start_time=_probe_start(cache, state))
            assert cache.can_terminate_prefetch(op) == spec.decide([state]), state
    assert spec.check(trace.trace(), cache.termination, clauses=["D"]) == []


def test_timeout_is_strictly_after_an_exact_budget(tmp_path, cache_factory):
    clock = ManualClock(1000.0)
    # Exactly representable: 2.0 + 0.5 * 8 / 1024 = 2.00390625.
    with make_cache(cache_factory, (), storage_backend="memory", prefetch_policy="timeout", clock=clock,
                    timeout_base_s=2.0, timeout_per_ki_token_s=0.5, timeout_max_s=30.0) as cache:
        state = DecisionState("timeout", PAGE, 2, 0, False, False, True, False)
        assert spec.timeout_budget(cache.termination, 2) == 2.00390625
        op = cache.make_probe_operation(state, start_time=clock.now())
        clock.advance(2.00390625)
        assert cache.can_terminate_prefetch(op) is False
        clock.advance(2.0 ** -20)
        assert cache.can_terminate_prefetch(op) is True


def test_a_long_hits_budget_is_capped_at_timeout_max(tmp_path, cache_factory):
    clock = ManualClock(1000.0)
    with make_cache(cache_factory, (), storage_backend="memory", prefetch_policy="timeout", clock=clock,
                    timeout_base_s=2.0, timeout_per_ki_token_s=1.0, timeout_max_s=3.0) as cache:
        pages = 1024  # 4096 tokens: 6.0 s uncapped
        state = DecisionState("timeout", PAGE, pages, 0, False, False, True, False)
        assert spec.timeout_budget(cache.termination, pages) == 3.0
        op = cache.make_probe_operation(state, start_time=clock.now())
        clock.advance(3.0)
        assert cache.can_terminate_prefetch(op) is False
        clock.advance(0.5)  # uncapped, this would still wait until 6.0 s
        assert cache.can_terminate_prefetch(op) is True


def test_pool_transfers_pending_keep_a_complete_kv_waiting(tmp_path, cache_factory):
    with make_cache(cache_factory, (), storage_backend="memory", prefetch_policy="wait_complete") as cache:
        pending = DecisionState("wait_complete", PAGE, 2, 2 * PAGE, False, True, False, False)
        op = cache.make_probe_operation(pending, start_time=cache.clock.now())
        assert cache.can_terminate_prefetch(op) is False
        op.pool_transfers_done = True
        assert cache.can_terminate_prefetch(op) is True
