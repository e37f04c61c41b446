"""Faults: storage errors, missing and damaged pages, slow IO, aborts, full host tiers.

Every test stores one request (4 pages, loaded in 2 KV batches, plus the
adapter's default extra pools), injects one fault into its prefetch, lets it
end, and then checks the same things (explore.check_outcome): the bytes
loaded back equal the generated data for whatever prefix was loaded (no
garbage), the spec's invariants hold over the trace, slot accounting is exact
and nothing stays allocated after evict_all. make_cache's teardown checks that
no thread is left.

Damaged pages: the storage interface turns a short or foreign page into a miss
(its files carry a header with the payload length); tests that damage files
find them under storage_dir by their names, which end with the page key. The
keys come from the trace's page_write events, never from the implementation.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest

from conformance.bounds import WAIT_S
from conformance.gates import WatchedTrace
from conformance.oracles.outcome import check_outcome
from conformance.gates import Gate
from conformance.scenarios.races import page_loaded_ok
from conformance.scenarios.schedule_model import EXTRAS_WITH_EACH_BATCH, adapter_io_order
from conformance.scenarios.workload import drive, request_data, request_tokens, store
from conformance.oracles.outcome import trailing_pools
from spec.config import Policy, TerminationConfig
from spec.decision import DecisionState
from spec.divergences import suffix as divergence_suffix
from spec.fence import HitPolicy, PoolProgress, committable_pages
from spec.timeout import timeout_budget
from spec.trace import LOAD, Event, EventKind

RID = "faulty"
# KV always; an extra pool only for adapters running with it.
POOL_PARAMS = ["kv", *(pytest.param(p, marks=pytest.mark.needs(f"default_pool:{p}")) for p in ("indexer", "mamba"))]
EXTRA = pytest.mark.needs("extra_pools")
PAGES = 4
BATCH_PAGES = 2  # two KV batches


@dataclass
class Rig:
    trace: WatchedTrace
    gate: Gate
    clock: Any
    storage_dir: Path
    make: Callable[..., Any]
    page_size: int

    def config(self, policy: str) -> TerminationConfig:
        return TerminationConfig(policy=policy, page_size=self.page_size)


@pytest.fixture
def rig(make_cache, clock, tmp_path, profile):
    """Caches on a trace that wakes waiters on every event, with a gate on it."""
    trace = WatchedTrace(clock, profile=profile.id)
    gate = Gate(trace)
    storage_dir = tmp_path / "fault-storage"

    def make(policy: str = "wait_complete", **fields):
        fields.setdefault("batch_pages", BATCH_PAGES)
        return make_cache(policy=policy, trace=trace, clock=clock, storage_dir=storage_dir, **fields)

    yield Rig(trace, gate, clock, storage_dir, make, make_cache.page_size)
    gate.close()  # release parked threads before make_cache closes the caches


def stored_request(rig: Rig, cache, seed: int = 5) -> tuple[list[int], dict]:
    tokens = request_tokens(seed, PAGES * rig.page_size)
    data = request_data(cache, tokens, seed)
    store(cache, tokens, data)
    return tokens, data


def nth_load(rig: Rig, pool: str, n: int) -> Callable[[Event], bool]:
    """The n-th storage-to-host IO start of `pool` for RID (counted in the trace, no state of its own)."""

    def same(e: Event) -> bool:
        return e.kind is EventKind.IO_START and e.op == RID and e.pool == pool and e.value == LOAD

    def predicate(e: Event) -> bool:
        return same(e) and sum(1 for x in rig.trace.events() if x.seq < e.seq and same(x)) == n - 1

    return predicate


def extra_pools(cache) -> list[str]:
    return [name for name in cache.pools if name != "kv"]


def all_pages_extras(cache) -> list[str]:
    return [name for name in extra_pools(cache) if cache.pools[name].hit_policy is HitPolicy.ALL_PAGES]


def need_pool(cache, impl, pool: str) -> None:
    assert pool in cache.pools, f"test setup: {impl.name} declares {pool} among its default extra pools, yet its cache runs without it"


def page_keys(rig: Rig, pool: str) -> list[str]:
    keys: list[str] = []
    for e in rig.trace.events():
        if e.kind is EventKind.PAGE_WRITE and e.pool == pool:
            keys += [k for k in e.keys if k not in keys]
    return keys


def stored_file(rig: Rig, impl, key: str) -> Path:
    found = [p for p in rig.storage_dir.rglob("*") if p.is_file() and p.name.endswith(key) and not p.name.startswith(".")]
    if len(found) != 1:
        pytest.skip(f"adapter {impl.name!r} keeps no single file named after page key {key[:16]}... under storage_dir (found {len(found)})")
    return found[0]


def damaged_page(rig: Rig, pool: str) -> tuple[str, int]:
    """Which stored page of `pool` a test damages, and the pages that stay usable before it."""
    keys = page_keys(rig, pool)
    if pool == "kv":
        assert len(keys) == PAGES, f"expected {PAGES} kv page writes in the trace, got {len(keys)}"
        return keys[2], 2  # the first page of the second batch
    if len(keys) == PAGES:  # a per-page pool: the second page
        return keys[1], 1
    assert len(keys) == 1, f"expected {PAGES} or 1 page writes of pool {pool}, got {len(keys)}"
    return keys[0], PAGES  # a state pool: one state, at the last page


def finish(rig: Rig, cache, policy: str, tokens, data, committed: int):
    rig.trace.wait_for_event(EventKind.IO_DONE, RID, WAIT_S)
    cache.check_progress([])  # the step at which slots of ended operations may be freed
    return check_outcome(cache, rig.trace, rig.config(policy), tokens, data, committed)


def assert_usable_prefix(rig: Rig, cache, loaded, committed: int, usable_pages: int, damaged_pool: str) -> None:
    """No more than the usable prefix (of the damaged pool) was committed; a damaged state is never served."""
    layout = cache.pools[damaged_pool]
    if layout.unit == "state":
        assert damaged_pool not in loaded.data, f"F4: the {damaged_pool} state was missing in storage, yet one was loaded"
        return
    assert committed <= usable_pages * rig.page_size, (
        f"F3: {committed} tokens committed although pool {damaged_pool} has only {usable_pages} usable pages"
    )


# --- storage raising -------------------------------------------------------------------------

@pytest.mark.clause("F3", "F11", "F8", "S1", "S3", "S5", "L1", "L5")
@pytest.mark.parametrize("policy", ["wait_complete", "timeout"])
@pytest.mark.parametrize("batch", [1, 2])
def test_storage_raising_is_a_failed_transfer(rig, impl, policy, batch, page_size):
    cache = rig.make(policy)
    tokens, data = stored_request(rig, cache)
    rig.gate.fail(f"storage raises at KV batch {batch}", nth_load(rig, "kv", batch))
    assert cache.prefetch(RID, tokens) == len(tokens)
    cache.wait_prefetch_io(RID)
    committed = drive(cache, [RID], max_steps=3, trace=rig.trace)[RID]  # waiting ends once IO ended (L1)
    failed = [e for e in rig.trace.events() if e.kind is EventKind.IO_END and e.op == RID and e.pool == "kv" and e.value is False]
    assert failed, "the injected storage error was not recorded as a failed transfer (io_end with ok False)"
    good_pages = (batch - 1) * BATCH_PAGES
    assert committed <= good_pages * page_size, f"F3: {committed} tokens committed, but only {good_pages} pages arrived before the failed batch"
    finish(rig, cache, policy, tokens, data, committed)


# --- partial hits and damaged pages --------------------------------------------------------------

@pytest.mark.clause("F3", "F11", "F4", "F8", "S3", "S5")
@pytest.mark.parametrize("pool", POOL_PARAMS)
def test_partial_hit_loads_only_the_stored_prefix(rig, impl, pool):
    cache = rig.make("wait_complete")
    need_pool(cache, impl, pool)
    tokens, data = stored_request(rig, cache)
    key, usable = damaged_page(rig, pool)
    stored_file(rig, impl, key).unlink()
    if cache.prefetch(RID, tokens):
        cache.wait_prefetch_io(RID)
        committed = drive(cache, [RID], max_steps=3, trace=rig.trace)[RID]
        loaded = finish(rig, cache, "wait_complete", tokens, data, committed)
    else:  # an implementation may see the short hit up front and queue nothing
        committed = 0
        loaded = check_outcome(cache, rig.trace, rig.config("wait_complete"), tokens, data, 0)
    assert_usable_prefix(rig, cache, loaded, committed, usable, pool)


def _truncate(path: Path) -> None:
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])


def _damage_header(path: Path) -> None:
    raw = bytearray(path.read_bytes())
    raw[:4] = bytes(b ^ 0xFF for b in raw[:4])
    path.write_bytes(bytes(raw))


def _flip_payload_byte(path: Path) -> None:
    """Bit rot: one bit of the last byte (payload in any layout that puts a header first), the file's length unchanged."""
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 0x01
    path.write_bytes(bytes(raw))


@pytest.mark.clause("F3", "F11", "F4", "F8", "S1", "S3", "S5", "S7", "L5")
@pytest.mark.parametrize("damage", [_truncate, _damage_header, _flip_payload_byte], ids=["truncated", "bad-header", "payload-bit-flip"])
@pytest.mark.parametrize("pool", POOL_PARAMS)
def test_short_or_corrupt_page_is_a_miss(rig, impl, pool, damage):
    cache = rig.make("wait_complete")
    need_pool(cache, impl, pool)
    tokens, data = stored_request(rig, cache)
    key, usable = damaged_page(rig, pool)
    damage(stored_file(rig, impl, key))
    assert cache.prefetch(RID, tokens) == len(tokens)  # the page exists: only the get finds it unusable
    cache.wait_prefetch_io(RID)
    committed = drive(cache, [RID], max_steps=3, trace=rig.trace)[RID]
    try:
        loaded = finish(rig, cache, "wait_complete", tokens, data, committed)
    except AssertionError as exc:
        # The bytes were damaged on purpose: serving them is a damage check missing (S7), not a copy gone wrong.
        if str(exc).startswith("S5: "):
            raise AssertionError(f"S7: a damaged page of pool {pool} was served as data: {str(exc)[4:]}") from None
        raise
    try:
        assert_usable_prefix(rig, cache, loaded, committed, usable, pool)
    except AssertionError as exc:
        # Past the damaged page: its load said it arrived (the check missed the damage, S7), or it said it did
        # not and the commit went past it anyway (F3).
        if str(exc).startswith("F3: ") and page_loaded_ok(rig.trace, RID, pool, key):
            raise AssertionError(f"S7: the damaged page of pool {pool} ({damage.__name__.strip('_')}) was read as arrived; "
                                 f"then (a consequence): {str(exc)[4:]}") from None
        raise


# --- IO past the timeout ---------------------------------------------------------------------------

@pytest.mark.clause("L2", "T2", "D3", "D5", "F3", "F11", "F4", "F5", "F10", "S1", "S3", "S5")
@pytest.mark.parametrize("held", ["kv-batch-2", pytest.param("extra-pool", marks=EXTRA)])
def test_io_past_the_timeout_is_excluded(rig, impl, held, profile, page_size):
    cache = rig.make("timeout")
    extras = extra_pools(cache)
    tokens, data = stored_request(rig, cache)
    target = ("kv", 2) if held == "kv-batch-2" else (extras[0], 1)
    hold = rig.gate.hold(f"{held} of {RID}", nth_load(rig, *target))
    assert cache.prefetch(RID, tokens) == len(tokens)
    hold.wait_reached()
    # The pages each pool holds at the hold. After all of KV (the default order), the extra pools wait for KV's last
    # batch; beside each KV batch, an ALL_PAGES pool has every landed batch's pages and KV stops at the held pool's batch.
    per_batch = adapter_io_order(impl) == EXTRAS_WITH_EACH_BATCH
    held_beside_kv = per_batch and target[0] in all_pages_extras(cache)  # the first batch's get, KV's second not begun
    kv_pages = BATCH_PAGES if held == "kv-batch-2" or held_beside_kv else PAGES
    landed_with_kv = set(all_pages_extras(cache)) if per_batch and not held_beside_kv else set()
    # Held extra pool: KV complete, a transfer pending (D3); KV incomplete, not timed out (D5).
    clause = profile.counterpart("D3" if kv_pages == PAGES else "D5")
    assert cache.check_progress([RID]) == {}, f"{clause}: terminated with the {held} transfer still running, before the deadline"
    rig.clock.advance(timeout_budget(rig.config("timeout"), PAGES) + 0.5)
    done = cache.check_progress([RID])
    # Held extra pool: KV landed and a pool pending past the deadline, the state upstream's design holds (a divergence).
    landed = DecisionState(policy=Policy.TIMEOUT, page_size=page_size, hit_pages=PAGES, completed_tokens=PAGES * page_size,
                           timed_out=True, pool_transfers_present=True, pool_transfers_done=False, terminated=False)
    held_landed = divergence_suffix(landed, False) if kv_pages == PAGES else ""
    assert RID in done, f"L2: every rank was past the deadline, yet the check did not terminate the prefetch{held_landed}"
    committed = done[RID]
    # F3/F5: only finished IO counts; the held transfer and everything after it are excluded.
    pools = [PoolProgress(name, cache.pools[name].hit_policy, kv_pages if name in landed_with_kv else 0) for name in extras]
    want = committable_pages(kv_pages, pools) * page_size
    assert committed <= want, f"F3: committed {committed} tokens at the timeout; finished IO allows at most {want}"
    assert committed == want, f"F11: committed {committed} tokens at the timeout; finished IO allows {want}: loaded pages were dropped"
    hold.release()
    loaded = finish(rig, cache, "timeout", tokens, data, committed)
    for name in extras:
        if name in trailing_pools(cache):
            assert name not in loaded.data, f"F4/F10: the {name} transfer was in flight at terminate, yet its data was attached"


# --- an extra pool failing after KV succeeded ---------------------------------------------------------

@pytest.mark.clause("F3", "F11", "F4", "F6", "F10", "S1", "S5", "L1", "L5")
@pytest.mark.parametrize("policy", ["wait_complete", "timeout", "best_effort"])
@pytest.mark.needs("extra_pools")
def test_extra_pool_failing_after_kv(rig, impl, policy):
    cache = rig.make(policy)
    extras = extra_pools(cache)
    tokens, data = stored_request(rig, cache)
    for name in extras:
        rig.gate.fail(f"storage raises at the {name} transfer", nth_load(rig, name, 1))
    assert cache.prefetch(RID, tokens) == len(tokens)
    cache.wait_prefetch_io(RID)  # KV succeeded; every extra transfer failed
    committed = drive(cache, [RID], max_steps=3, trace=rig.trace)[RID]
    if all_pages_extras(cache):
        assert committed == 0, f"F3: {committed} tokens of KV committed while their {all_pages_extras(cache)} pages failed"
    loaded = finish(rig, cache, policy, tokens, data, committed)
    for name in extras:
        if name in trailing_pools(cache):
            assert name not in loaded.data, f"F4/F10: the {name} transfer failed, yet its data was attached"


# --- abort mid-prefetch ---------------------------------------------------------------------------

@pytest.mark.clause("F5", "F8", "S1", "S2", "S3", "S5")
@pytest.mark.parametrize("policy", ["wait_complete", "best_effort"])
@pytest.mark.parametrize("when", ["at-once", "kv-batch-2", pytest.param("extra-pool", marks=EXTRA), "after-io"])
def test_abort_mid_prefetch_returns_every_slot(rig, impl, policy, when):
    cache = rig.make(policy)
    extras = extra_pools(cache)
    tokens, data = stored_request(rig, cache)
    hold = None
    if when in ("kv-batch-2", "extra-pool"):
        target = ("kv", 2) if when == "kv-batch-2" else (extras[0], 1)
        hold = rig.gate.hold(f"{when} of {RID}", nth_load(rig, *target))
    assert cache.prefetch(RID, tokens) == len(tokens)
    if hold is not None:
        hold.wait_reached()
    elif when == "after-io":
        cache.wait_prefetch_io(RID)
    # "at-once" races the hit query on purpose: every outcome must be safe.
    cache.abort(RID)
    if hold is not None:
        hold.release()
    rig.trace.wait_for_event(EventKind.IO_DONE, RID, WAIT_S)
    after = cache.check_progress([RID])
    assert after.get(RID, 0) == 0, f"F8: an aborted prefetch reported {after[RID]} committed tokens"
    finish(rig, cache, policy, tokens, data, 0)


# --- host slots exhausted -------------------------------------------------------------------------

@pytest.mark.clause("S8", "F8", "S3", "S5", "L1", "F11")
@pytest.mark.parametrize(("host_pages", "threshold_pages"), [(3, 1), (1, 2)], ids=["shrinks", "skipped"])
def test_full_host_tier_shrinks_or_skips_the_prefetch(rig, impl, host_pages, threshold_pages, page_size):
    writer = rig.make("wait_complete")
    tokens, data = stored_request(rig, writer)
    cache = rig.make("wait_complete", host_pages=host_pages, threshold_pages=threshold_pages)
    # The first load held until the request is judged: what the IO thread then does with the request (a bad one can kill
    # it) comes after the S8 verdict, not before it.
    loading = rig.gate.hold(f"the first KV load of {RID}", nth_load(rig, "kv", 1))
    requested = cache.prefetch(RID, tokens)
    fits = host_pages * page_size
    assert requested % page_size == 0 and 0 <= requested <= fits, (
        f"S8: prefetch requested {requested} tokens with host room for {fits}: it must shrink to whole pages that fit, or be skipped"
    )
    if host_pages < threshold_pages:
        assert requested == 0, f"S8: {requested} tokens requested although fewer than {threshold_pages} pages fit"
    loading.release()
    committed = 0
    if requested:
        cache.wait_prefetch_io(RID)
        committed = drive(cache, [RID], max_steps=3, trace=rig.trace)[RID]
        # The hit may be shorter than what fits: a state pool's hit ends where a state is stored.
        hits = [int(e.value) for e in rig.trace.events() if e.kind is EventKind.HIT and e.op == RID]
        hit_tokens = (hits[-1] if hits else 0) * page_size
        assert hit_tokens <= requested, f"S8: a {hit_tokens}-token hit from a prefetch of {requested} tokens"
        # A shrunk prefetch ends where no state is stored: the fence commits its KV and drops the state (F4); committing
        # less is short, not stuck.
        short = "F11" if trailing_pools(cache) and committed < hit_tokens else "L1"
        assert committed == hit_tokens, f"{short}: wait_complete committed {committed} tokens of a {hit_tokens}-token hit ({requested} requested)"
        served = sum(cache.match(tokens))
        assert served >= committed, f"F8: {committed} tokens committed, but a match serves only {served}"
        rig.trace.wait_for_event(EventKind.IO_DONE, RID, WAIT_S)
    cache.check_progress([])
    check_outcome(cache, rig.trace, rig.config("wait_complete"), tokens, data, committed)
