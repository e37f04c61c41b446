"""HiMambaRadixCache: state-truncated matching, host state LRU and pins, prefetch
commit of the trailing state (F4), and its own termination decision against the spec."""

from __future__ import annotations

import math
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from conformance.bounds import WAIT_S
from caches.config import CacheConfig
from caches.core.hashing import page_hashes
from caches.hi_mamba_radix import HiMambaRadixCache
from caches.storage import pool_key
from conformance.multirank.processes import run_ranks
from conformance.oracles.outcome import same_bytes
from conformance.scenarios.workload import pool_data
from spec import check
from spec.clock import ManualClock
from spec.decision import DecisionState, decide, enumerate_states, local_vote, vote_clause
from spec.errors import ConfigError
from spec.timeout import is_timed_out, timeout_budget
from spec.trace import BACKUP, EventKind, TraceRecorder

PAGE = 4
KV_SHAPE = (2, 3)
STATE_SHAPE = (5,)
POOL_SHAPES = [SimpleNamespace(name="kv", unit="token", elem_shape=KV_SHAPE, dtype=torch.float32),
               SimpleNamespace(name="mamba", unit="state", elem_shape=STATE_SHAPE, dtype=torch.float32)]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1000.0)


@pytest.fixture
def make(tmp_path: Path, clock: ManualClock, cache_factory):
    """make(policy=..., trace=..., **config fields) -> a cache, ended by the shared factory (tests/conftest.py)."""

    def build(policy: str = "wait_complete", *, trace: TraceRecorder | None = None, **fields) -> HiMambaRadixCache:
        settings = dict(
            page_size=PAGE, device_pages=16, host_pages=32, state_device_slots=8, state_host_slots=8,
            kv_elem_shape=KV_SHAPE, state_elem_shape=STATE_SHAPE, extra_pools=("mamba",),
            prefetch_policy=policy, storage_backend="file", storage_path=str(tmp_path / "storage"),
            storage_batch_pages=2, wait_timeout_s=WAIT_S,
        )
        settings.update(fields)
        return cache_factory.adopt(HiMambaRadixCache(CacheConfig(**settings), trace=trace, clock=clock))

    return build


def random_data(tokens: list[int], seed: int, *, with_state: bool = True) -> dict[str, torch.Tensor]:
    """Random bytes for the KV rows of `tokens` and (with_state) one mamba state."""
    return pool_data(POOL_SHAPES, len(tokens), seed, states=with_state)


def load(cache: HiMambaRadixCache, tokens: list[int]) -> tuple[int, dict[str, torch.Tensor]]:
    """What a scheduler does: match, load the host part back, match again, read the device."""
    m = cache.match_prefix(tokens)
    if m.host_hit_tokens:
        assert cache.load_back(m.host_node) is not None
        m = cache.match_prefix(tokens)
        assert m.host_hit_tokens == 0
    return m.device_hit_tokens, cache.read_device(m.device_slots, state_node=m.device_node)


def hits(cache: HiMambaRadixCache, tokens: list[int]) -> tuple[int, int]:
    m = cache.match_prefix(tokens)
    assert m.matched_tokens == m.device_hit_tokens + m.host_hit_tokens
    return m.device_hit_tokens, m.host_hit_tokens


def state_ref(cache: HiMambaRadixCache, tokens: list[int]):
    """The mamba StateRef of the node ending exactly at `tokens` (tree lookup without touching LRU ticks)."""
    node = cache.tree.root
    pos = 0
    while pos < len(tokens):
        node = node.children[tuple(tokens[pos : pos + PAGE])]
        pos += len(node.key)
    assert pos == len(tokens), "no node ends there"
    return node, cache.states(node).get("mamba")


def assert_accounting(cache: HiMambaRadixCache) -> None:
    """Every allocator balances, and what it lent out is exactly what the tree holds.

    Flushes first: a backup still in flight holds host slots the tree does not have yet.
    """
    cache.flush()
    cache.copies.wait()
    accounting = cache.slot_accounting()
    for name, (allocated, free, capacity) in accounting.items():
        assert allocated + free == capacity, name
    refs = [cache.states(n).get("mamba") for n in cache.tree.iter_nodes()]
    refs = [r for r in refs if r is not None]
    assert accounting["device:kv"][0] == cache.tree.device_tokens()
    assert accounting["host:kv"][0] == cache.tree.host_tokens()
    assert accounting["device:state"][0] == sum(r.device is not None for r in refs)
    assert accounting["host:state"][0] == sum(r.host is not None for r in refs)
    cache.tree.check_invariants()


def run_prefetch(cache: HiMambaRadixCache, rid: str, tokens: list[int], checks: int = 5) -> int:
    requested = cache.prefetch_from_storage(rid, tokens)
    assert requested > 0
    cache.wait_prefetch_io(rid)
    for _ in range(checks):
        done = cache.check_prefetch_progress([rid])
        if rid in done:
            assert rid not in cache.ongoing_prefetch
            return done[rid]
    raise AssertionError(f"prefetch {rid} not finished after {checks} checks with its IO done")


def stored(cache: HiMambaRadixCache, tokens: list[int], data: dict[str, torch.Tensor]) -> None:
    cache.write(tokens, data)
    cache.flush()


# --- end to end ---------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["best_effort", "wait_complete", "timeout"])
def test_storage_roundtrip_into_a_fresh_cache_is_byte_exact(make, clock, policy):
    tokens = list(range(1, 17))
    data = random_data(tokens, seed=1)
    writer_trace = TraceRecorder(clock)
    writer = make(policy, trace=writer_trace)
    stored(writer, tokens, data)
    writer.evict_all()
    assert hits(writer, tokens) == (0, 0)
    assert_accounting(writer)
    assert check(writer_trace.trace(), writer.termination) == []

    trace = TraceRecorder(clock)
    cache = make(policy, trace=trace)
    assert hits(cache, tokens) == (0, 0)
    assert run_prefetch(cache, "r1", tokens) == 16
    assert hits(cache, tokens) == (0, 16)
    loaded, read = load(cache, tokens)
    assert loaded == 16
    for pool in ("kv", "mamba"):
        assert read[pool].dtype == data[pool].dtype
        assert same_bytes(read[pool], data[pool]), pool
    assert cache.stats.storage_hit_tokens == 16
    assert_accounting(cache)
    assert check(trace.trace(), cache.termination) == []
    inserted = {e.pool for e in trace.events() if e.kind is EventKind.INSERT and e.op == "r1"}
    assert inserted == {"kv", "mamba"}


# --- matching needs the state ---------------------------------------------------------


def test_match_ends_at_the_deepest_node_carrying_a_state_on_device(make):
    cache = make()
    prefix, longer = list(range(1, 9)), list(range(1, 17))
    prefix_data = random_data(prefix, seed=2)
    cache.write(prefix, prefix_data)
    cache.write(longer, random_data(longer, seed=3, with_state=False))
    assert hits(cache, longer) == (8, 0)
    m = cache.match_prefix(longer)
    assert m.device_node is m.host_node
    assert len(m.device_node.key) == 8 and m.device_node.parent is cache.tree.root
    tokens, read = load(cache, longer)
    assert tokens == 8
    assert same_bytes(read["mamba"], prefix_data["mamba"])
    assert same_bytes(read["kv"], prefix_data["kv"])
    # Nothing on the path carries a state: nothing is usable.
    other = list(range(100, 112))
    cache.write(other, random_data(other, seed=4, with_state=False))
    assert hits(cache, other) == (0, 0)
    assert_accounting(cache)


def test_a_stateless_node_in_the_middle_of_the_path_is_fine(make):
    cache = make()
    a, ab, abc = list(range(1, 5)), list(range(1, 9)), list(range(1, 13))
    cache.write(a, random_data(a, seed=5, with_state=False))
    cache.write(ab, random_data(ab, seed=6, with_state=False))
    last = random_data(abc, seed=7)
    cache.write(abc, last)
    assert hits(cache, abc) == (12, 0)
    # A longer request whose extra page has no state still ends at abc.
    assert hits(cache, abc + [50, 51, 52, 53]) == (12, 0)
    assert hits(cache, ab) == (0, 0)
    assert_accounting(cache)


def test_host_match_ends_at_the_deepest_host_state_and_loads_it_back(make):
    cache = make()
    prefix, longer = list(range(1, 9)), list(range(1, 17))
    prefix_data = random_data(prefix, seed=8)
    stored(cache, prefix, prefix_data)
    stored(cache, longer, random_data(longer, seed=9, with_state=False))
    cache.evict(cache.tree.device_tokens())
    cache.copies.wait()
    assert cache.tree.device_tokens() == 0 and cache.tree.host_tokens() == 16
    m = cache.match_prefix(longer)
    assert (m.device_hit_tokens, m.host_hit_tokens, m.matched_tokens) == (0, 8, 8)
    assert m.device_node is cache.tree.root and m.host_node.parent is cache.tree.root
    tokens, read = load(cache, longer)
    assert tokens == 8
    assert same_bytes(read["kv"], prefix_data["kv"])
    assert same_bytes(read["mamba"], prefix_data["mamba"])
    assert_accounting(cache)


def test_a_device_hit_extends_into_a_host_end_with_a_state(make):
    cache = make()
    ab, abcd = list(range(1, 9)), list(range(1, 17))
    head = random_data(ab, seed=10, with_state=False)
    stored(cache, ab, head)
    deep = random_data(abcd, seed=11)
    stored(cache, abcd, deep)
    # Only the deeper node leaves the device: the device part has no state at all.
    node, ref = state_ref(cache, abcd)
    cache.evict(8)
    cache.copies.wait()
    assert node.value is None and ref.device is None and ref.host is not None
    m = cache.match_prefix(abcd)
    assert (m.device_hit_tokens, m.host_hit_tokens) == (8, 8)
    assert m.host_node is node
    tokens, read = load(cache, abcd)
    assert tokens == 16
    # The first pages were already cached: the tree kept the first write's copy.
    assert same_bytes(read["kv"], torch.cat([head["kv"], deep["kv"][8:]]))
    assert same_bytes(read["mamba"], deep["mamba"])
    assert_accounting(cache)


# --- prefetch commit: the state only when its transfer hit (F4) ------------------------


@pytest.mark.parametrize("damage", ["delete", "truncate"])
def test_state_attached_only_when_its_transfer_hit(make, clock, damage):
    tokens = list(range(1, 17))
    data = random_data(tokens, seed=12)
    writer = make()
    stored(writer, tokens, data)
    state_file = writer.storage.path_for(pool_key(page_hashes(tokens, PAGE)[-1], "mamba"))
    assert state_file.exists()
    if damage == "delete":
        state_file.unlink()
    else:
        state_file.write_bytes(state_file.read_bytes()[:10])

    trace = TraceRecorder(clock)
    cache = make(trace=trace)
    committed = run_prefetch(cache, "r1", tokens)
    if damage == "delete":
        # The hit query finds no stored state at any page: nothing a match could end at is committed.
        assert committed == 0 and cache.tree.host_tokens() == 0
    else:
        # The state is stored but its transfer fails: the KV is committed without it (F4).
        assert committed == 16
        node, ref = state_ref(cache, tokens)
        assert node.host_value is not None
        assert ref is None or ref.host is None
    assert cache.slot_accounting()["host:state"][0] == 0  # its slot went back
    assert hits(cache, tokens) == (0, 0)  # so nothing is usable
    assert_accounting(cache)
    assert check(trace.trace(), cache.termination) == []
    mamba_inserts = [e for e in trace.events() if e.kind is EventKind.INSERT and e.pool == "mamba"]
    mamba_frees = [e for e in trace.events() if e.kind is EventKind.FREE and e.pool == "mamba" and e.op == "r1"]
    assert mamba_inserts == [] and len(mamba_frees) == 1


def test_a_prefetch_below_a_host_state_keeps_the_shorter_match_when_the_new_state_misses(make, clock):
    prefix, longer = list(range(1, 9)), list(range(1, 17))
    writer = make()
    prefix_data = random_data(prefix, seed=13)
    stored(writer, prefix, prefix_data)
    stored(writer, longer, random_data(longer, seed=14))
    # The longer prefix's state is stored but damaged: its transfer misses.
    state_file = writer.storage.path_for(pool_key(page_hashes(longer, PAGE)[-1], "mamba"))
    state_file.write_bytes(state_file.read_bytes()[:10])
    writer.evict_all()
    # The fresh cache holds the prefix (with its state) on the host; the rest comes from storage.
    cache = make()
    assert run_prefetch(cache, "r0", prefix) == 8
    assert hits(cache, longer) == (0, 8)
    assert run_prefetch(cache, "r1", longer) == 8
    assert cache.tree.host_tokens() == 16
    assert hits(cache, longer) == (0, 8)
    tokens, read = load(cache, longer)
    assert tokens == 8 and same_bytes(read["mamba"], prefix_data["mamba"])
    assert_accounting(cache)


# --- host state LRU and pins -------------------------------------------------------------


def three_host_prefixes(cache: HiMambaRadixCache) -> list[list[int]]:
    seqs = [list(range(10 * k + 1, 10 * k + 9)) for k in (1, 2, 3)]
    for seed, seq in enumerate(seqs):
        stored(cache, seq, random_data(seq, seed=20 + seed))
    cache.evict(cache.tree.device_tokens())
    cache.copies.wait()
    return seqs


def test_evict_mamba_host_frees_states_lru_first_and_keeps_kv(make):
    cache = make()
    x, y, z = three_host_prefixes(cache)
    assert [hits(cache, s) for s in (x, y, z)] == [(0, 8)] * 3
    # Use order now: x, then z, then y (most recent).
    for seq in (x, z, y):
        cache.match_prefix(seq)
    free_before = cache.slot_accounting()["host:state"][1]
    assert cache.evict_mamba_host(1) == 1
    assert state_ref(cache, x)[1].host is None
    assert state_ref(cache, x)[0].host_value is not None  # KV pages stay on the host
    assert hits(cache, x) == (0, 0)  # no longer a usable host end
    assert hits(cache, z) == (0, 8) and hits(cache, y) == (0, 8)
    assert cache.slot_accounting()["host:state"][1] == free_before + 1
    # z and y were just matched again, z first: z is the older one now.
    assert cache.evict_mamba_host(1) == 1
    assert state_ref(cache, z)[1].host is None and state_ref(cache, y)[1].host is not None
    assert cache.evict_mamba_host(5) == 1
    assert cache.evict_mamba_host(5) == 0
    assert cache.tree.host_tokens() == 24
    assert_accounting(cache)
    with pytest.raises(ConfigError, match="num_states"):
        cache.evict_mamba_host(-1)


def test_deeper_state_is_older_than_its_ancestors_after_a_match(make):
    cache = make()
    a, ab = list(range(1, 9)), list(range(1, 17))
    stored(cache, a, random_data(a, seed=30))
    stored(cache, ab, random_data(ab, seed=31))
    cache.evict(cache.tree.device_tokens())
    cache.match_prefix(ab)
    assert state_ref(cache, ab)[1].last_access < state_ref(cache, a)[1].last_access
    assert cache.evict_mamba_host(1) == 1
    assert state_ref(cache, ab)[1].host is None and state_ref(cache, a)[1].host is not None
    assert hits(cache, ab) == (0, 8)
    assert_accounting(cache)


def test_host_state_shortage_evicts_states_not_kv(make):
    cache = make(state_host_slots=2)
    seqs = [list(range(10 * k + 1, 10 * k + 9)) for k in (1, 2, 3)]
    for seed, seq in enumerate(seqs):
        stored(cache, seq, random_data(seq, seed=40 + seed))
    # The third backup needed a host state slot: the least recently used state gave it up.
    assert state_ref(cache, seqs[0])[1].host is None
    assert all(state_ref(cache, s)[1].host is not None for s in seqs[1:])
    assert cache.tree.host_tokens() == 24  # no KV was evicted for it
    assert_accounting(cache)


def test_a_state_pinned_by_a_running_storage_backup_is_not_evicted(make, clock):
    trace = TraceRecorder(clock)
    reached, release = threading.Event(), threading.Event()

    def hold_state_backup(event):
        if event.kind is EventKind.IO_START and event.value == BACKUP and event.pool == "mamba":
            reached.set()
            assert release.wait(WAIT_S), "test never released the held backup"

    trace.set_gate(hold_state_backup)
    cache = make(trace=trace)
    tokens = list(range(1, 9))
    cache.write(tokens, random_data(tokens, seed=50))
    cache.copies.wait()
    cache.writing_check()  # device->host done: the storage backup starts and is held
    assert reached.wait(WAIT_S), "the state's storage backup never started"
    ref = state_ref(cache, tokens)[1]
    assert ref.host is not None and ref.host_ref == 1
    try:
        assert cache.evict_mamba_host(8) == 0
    finally:
        release.set()
    cache.flush()
    assert ref.host_ref == 0
    assert cache.evict_mamba_host(8) == 1
    assert_accounting(cache)


def test_a_prefetch_pins_the_state_it_hangs_under_until_it_ends(make):
    prefix = list(range(1, 9))
    cache = make()
    stored(cache, prefix, random_data(prefix, seed=60))
    cache.evict(cache.tree.device_tokens())
    cache.copies.wait()
    ref = state_ref(cache, prefix)[1]
    # The continuation is not in storage: the prefetch is revoked, but stays tracked until checked.
    assert cache.prefetch_from_storage("r1", prefix + list(range(200, 208))) == 8
    cache.wait_prefetch_io("r1")
    assert ref.host_ref == 1
    assert cache.evict_mamba_host(8) == 0
    assert cache.check_prefetch_progress(["r1"]) == {"r1": 0}
    assert ref.host_ref == 0
    assert cache.evict_mamba_host(8) == 1
    assert_accounting(cache)


def test_an_aborted_prefetch_returns_every_slot_and_its_pin(make):
    prefix = list(range(1, 9))
    cache = make()
    stored(cache, prefix, random_data(prefix, seed=61))
    cache.evict(cache.tree.device_tokens())
    cache.copies.wait()
    ref = state_ref(cache, prefix)[1]
    assert cache.prefetch_from_storage("r1", prefix + list(range(200, 208))) == 8
    cache.wait_prefetch_io("r1")
    cache.release_aborted_request("r1")
    assert ref.host_ref == 0 and "r1" not in cache.ongoing_prefetch
    assert_accounting(cache)


# --- the decision, against the spec ------------------------------------------------------


@pytest.mark.parametrize("policy", ["best_effort", "wait_complete", "timeout"])
def test_can_terminate_prefetch_equals_the_spec_for_every_state(make, clock, policy):
    trace = TraceRecorder(clock)
    cache = make(policy, trace=trace, storage_backend="memory")
    now = clock.now()
    states = [s for s in enumerate_states(PAGE) if s.policy.value == policy]
    assert states
    for state in states:
        budget = timeout_budget(cache.termination, state.hit_pages)
        start = now - budget - 1 if state.timed_out else now
        op = cache.make_probe_operation(state, start_time=start)
        assert cache.can_terminate_prefetch(op) == decide([state]), state
    votes = [e for e in trace.events() if e.kind is EventKind.VOTE]
    assert len(votes) == len(states)
    for state, vote in zip(states, votes):
        assert vote.value == local_vote(state)
        # The recorded state is the one probed (timed_out only computed under timeout).
        assert vote.state.completed_tokens == state.completed_tokens
        assert vote.state.pool_transfers_done == state.pool_transfers_done
        assert vote.state.terminated == state.terminated
        if policy == "timeout":
            assert vote.state.timed_out == state.timed_out
    assert check(trace.trace(), cache.termination, clauses=["D"]) == []


@pytest.mark.parametrize("fields", [{}, {"timeout_per_ki_token_s": 20000.0}], ids=["uncapped", "capped"])
@pytest.mark.parametrize("hit_pages", [0, 1, 3])
def test_timeout_boundary_matches_the_spec_to_the_tick(make, clock, fields, hit_pages):
    cache = make("timeout", storage_backend="memory", **fields)
    budget = timeout_budget(cache.termination, hit_pages)
    if fields and hit_pages:
        assert budget == cache.termination.timeout_max_s
    state = DecisionState(
        policy="timeout", page_size=PAGE, hit_pages=hit_pages, completed_tokens=0, timed_out=False,
        pool_transfers_present=True, pool_transfers_done=False, terminated=False,
    )
    start = clock.now()
    deadline = start + budget
    for now in (math.nextafter(deadline, -math.inf), deadline, math.nextafter(deadline, math.inf)):
        clock.set(max(now, clock.now()))
        op = cache.make_probe_operation(state, start_time=start)
        assert cache.can_terminate_prefetch(op) == is_timed_out(start, clock.now(), budget), now
    assert cache.can_terminate_prefetch(cache.make_probe_operation(state, start_time=start)) is True


def test_check_prefetch_progress_joins_untracked_ids_and_rejects_a_bare_string(make):
    cache = make(storage_backend="memory")
    assert cache.check_prefetch_progress(["gone", "also-gone"]) == {}
    with pytest.raises(ConfigError, match="request_ids"):
        cache.check_prefetch_progress("r1")


def test_the_cache_needs_the_mamba_pool():
    config = CacheConfig(page_size=PAGE, storage_backend="memory", extra_pools=())
    with pytest.raises(ConfigError, match="mamba"):
        HiMambaRadixCache(config)
    with pytest.raises(ConfigError, match="indexer"):
        HiMambaRadixCache(config.replace(extra_pools=("mamba", "indexer")))


def test_a_prefetch_that_queues_nothing_leaves_no_pin(make):
    prefix = list(range(1, 9))
    cache = make()
    stored(cache, prefix, random_data(prefix, seed=62))
    cache.evict(cache.tree.device_tokens())
    cache.copies.wait()
    ref = state_ref(cache, prefix)[1]
    # Everything asked for is already on the host: no page to fetch, nothing queued.
    assert cache.prefetch_from_storage("r1", prefix) == 0
    assert ref.host_ref == 0 and "r1" not in cache.ongoing_prefetch
    assert cache.evict_mamba_host(8) == 1
    assert_accounting(cache)


# --- two ranks: the reduce runs, and the combine is the spec's ------------------------------


def representatives(policy: str) -> list:
    """One state per (vote, terminated, settling clause): every way a rank can contribute."""
    seen = {}
    for s in enumerate_states(PAGE):
        if s.policy.value == policy:
            seen.setdefault((local_vote(s), s.terminated, vote_clause(s)), s)
    return list(seen.values())


def decide_every_pair(env) -> dict:
    """One rank: probe every pair of representative states (this rank's half of each), return what it decided."""
    out = {}
    for policy in ("best_effort", "wait_complete", "timeout"):
        clock = ManualClock(1000.0)
        trace = TraceRecorder(clock, rank=env.rank)
        config = CacheConfig(
            page_size=PAGE, extra_pools=("mamba",), prefetch_policy=policy, storage_backend="memory",
            kv_elem_shape=(2,), state_elem_shape=(2,), device_pages=4, host_pages=4, wait_timeout_s=WAIT_S,
        )
        cache = HiMambaRadixCache(config, trace=trace, clock=clock, process_group=env.group)
        states = representatives(policy)
        results = []
        for pair in ((a, b) for a in states for b in states):
            state = pair[env.rank]
            start = clock.now() - timeout_budget(config.termination, state.hit_pages) - 1 if state.timed_out else clock.now()
            results.append(cache.can_terminate_prefetch(cache.make_probe_operation(state, start_time=start)))
        votes = sum(1 for e in trace.events() if e.kind is EventKind.COLLECTIVE and e.value == "vote_max")
        cache.close()
        out[policy] = {"results": results, "vote_collectives": votes, "world_size": cache.world_size}
    return out


def test_two_ranks_reduce_once_per_check_and_combine_as_the_spec(tmp_path):
    outputs = run_ranks(f"{__file__}:decide_every_pair", 2, workdir=tmp_path, timeout_s=60)
    for policy in ("best_effort", "wait_complete", "timeout"):
        states = representatives(policy)
        expected = [decide([a, b]) for a in states for b in states]
        assert True in expected and (policy == "best_effort" or False in expected)
        for rank in (0, 1):
            got = outputs[rank][policy]
            assert got["world_size"] == 2
            assert got["results"] == expected, (policy, rank)
            assert got["vote_collectives"] == (0 if policy == "best_effort" else len(expected)), (policy, rank)
