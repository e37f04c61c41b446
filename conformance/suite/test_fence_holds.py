"""Where the fence's races live: an IO held at its end, the scheduler held inside terminate, a window half loaded.

These use the hold points an implementation may offer (capability
"hold_points", spec/SPEC.md "Trace contract"): io_landed (the storage call
returned, the IO's end and the progress it publishes not yet done), io_end
(gated after the end, before the IO thread's next step) and terminate
(gated after the mark and the snapshot, before the commit). Each reaches a
state in which one lock, one order or one re-check decides what is
committed, and names the clause that decides it. One test reaches the
gap between two batches by racing instead, so that an implementation
without hold points is judged on the re-check before a batch too.
"""

from __future__ import annotations

import sys

import pytest

from conformance.bounds import WAIT_S
from conformance.gates import WatchedTrace
from conformance.scenarios.races import (
    Background,
    close_and_check_trace,
    fence_tokens,
    op_events,
    pool_files,
    remove_files,
    require_pool,
    served,
    starts_after_terminate,
    stored_request,
)
from conformance.scenarios.workload import checked_progress, drive
from spec.config import TerminationConfig
from spec.trace import Event, EventKind

PAGES = 4
BATCH = 2
RACES = 120  # terminates racing the IO thread: a few in a hundred land between two batches


@pytest.fixture
def trace(clock, profile) -> WatchedTrace:
    """The harness's recorder, waking waiters on every event (an IO's end is awaited, never polled)."""
    return WatchedTrace(clock, profile=profile.id)


def make(make_cache, policy: str = "best_effort", **env):
    config = TerminationConfig(policy=policy, page_size=make_cache.page_size)
    return make_cache(termination=config, batch_pages=BATCH, **env), config


def nth_of(trace, kind: EventKind, pool: str, nth: int):
    """The nth `kind` event of r1's loads into `pool` (counted in the trace: no state of its own)."""
    loads = lambda e: e.op == "r1" and e.pool == pool and e.kind is kind  # noqa: E731

    def predicate(e: Event) -> bool:
        return loads(e) and sum(1 for x in trace.events() if x.seq <= e.seq and loads(x)) == nth

    return predicate


def terminated_while_held(cache, trace, gate, description: str, held_at, *, seed: int, page_size: int):
    """A stored request prefetched until its IO is parked at `held_at`, then one best_effort check: (tokens, data, hold, done)."""
    tokens, data = stored_request(cache, seed=seed, pages=PAGES, page_size=page_size)
    hold = gate.hold(description, held_at)
    assert cache.prefetch("r1", tokens) == len(tokens)
    hold.wait_reached()
    done = cache.check_progress(["r1"])
    assert "r1" in done, "D1: best_effort must stop waiting at the first check"
    return tokens, data, hold, done


@pytest.mark.needs("hold_points")
@pytest.mark.io_order("kv_then_extras", "holds the second KV batch with nothing else in flight")
@pytest.mark.clause("F3", "F11", "F5", "S1", "S3")
def test_a_batch_whose_bytes_landed_but_not_its_end_is_not_committed(impl, make_cache, trace, gate, page_size):
    """Terminate while the second KV batch's storage call has returned but its end has not published it."""
    cache, config = make(make_cache)
    tokens, data, landed, done = terminated_while_held(cache, trace, gate, "second KV batch landed",
                                                       nth_of(trace, EventKind.IO_LANDED, "kv", 2), seed=71, page_size=page_size)
    committed, allowed = done["r1"], fence_tokens(trace.events(), "r1", cache.pools, page_size)
    assert committed <= allowed, (
        f"F3: committed {committed} tokens while the second batch's bytes had landed but its end had not published them "
        f"(the fence allows {allowed}: what had ended when it was terminated)")
    landed.release()
    trace.wait_for_event(EventKind.IO_DONE, "r1", WAIT_S)
    cache.check_progress([])  # the step at which slots of ended operations may be freed
    served(cache, tokens, data, committed)
    close_and_check_trace(cache, trace, config)


@pytest.mark.needs("hold_points")
@pytest.mark.io_order("kv_then_extras", "holds the second KV batch with nothing else in flight")
@pytest.mark.clause("F2", "F3", "F11", "F5", "S1")
def test_the_commit_uses_the_snapshot_taken_with_the_terminate_mark(impl, make_cache, trace, gate, page_size):
    """The scheduler is held right after terminate while the second batch ends: the commit must be what the snapshot held.

    An implementation that reads progress again after the mark (outside its
    lock, or from the live operation) commits the batch that ended meanwhile.
    """
    cache, config = make(make_cache)
    tokens, data = stored_request(cache, seed=72, pages=PAGES, page_size=page_size)
    landed = gate.hold("second KV batch landed", nth_of(trace, EventKind.IO_LANDED, "kv", 2))
    assert cache.prefetch("r1", tokens) == len(tokens)
    landed.wait_reached()
    at_terminate = gate.hold("scheduler after terminating r1", lambda e: e.kind is EventKind.TERMINATE and e.op == "r1")
    checker = Background("check_progress(['r1'])", cache.check_progress, ["r1"])
    with checker.parked_at(gate):
        at_terminate.wait_reached()
        ended = gate.hold("second KV batch ended", nth_of(trace, EventKind.IO_END, "kv", 2))
        landed.release()  # the batch ends now, after the mark: nothing of it may count
        ended.wait_reached()
        ended.release()
    allowed = fence_tokens(trace.events(), "r1", cache.pools, page_size)
    at_terminate.release()
    done = checker.result()
    assert done.get("r1") == allowed, (
        f"F2: the commit of r1 is {done.get('r1')} tokens; what had ended at the terminate mark allows {allowed}: "
        f"progress was read again after the mark (a batch ended while the scheduler was between the mark and the commit)")
    served(cache, tokens, data, done["r1"])
    close_and_check_trace(cache, trace, config)


@pytest.mark.needs("hold_points")
@pytest.mark.io_order("kv_then_extras", "holds a KV batch's end, before the IO thread's next transfer could start")
@pytest.mark.clause("F1", "S2", "F5")
@pytest.mark.parametrize("held", ["first_kv_batch", "last_kv_batch"])
def test_no_batch_starts_after_a_terminate_between_two_batches(impl, make_cache, trace, gate, held, page_size):
    """The IO thread is held right after a KV batch ended; the scheduler terminates; nothing may start after.

    first_kv_batch: the next transfer is the second KV batch; last_kv_batch:
    the extra pools' transfer, where the implementation has extra pools.
    """
    cache, config = make(make_cache)
    nth = 1 if held == "first_kv_batch" else PAGES // BATCH
    tokens, data, ended, done = terminated_while_held(cache, trace, gate, f"KV batch {nth} ended",
                                                      nth_of(trace, EventKind.IO_END, "kv", nth), seed=73, page_size=page_size)
    ended.release()
    trace.wait_for_event(EventKind.IO_DONE, "r1", WAIT_S)
    checked_progress(cache, [], trace)
    late = starts_after_terminate(trace)
    assert not late, f"F1: {len(late)} transfer(s) of r1 started after it was terminated: {[e.describe() for e in late]}"
    served(cache, tokens, data, done["r1"])
    close_and_check_trace(cache, trace, config)


@pytest.mark.clause("F1", "S2")
def test_no_batch_starts_after_terminates_that_race_the_io_thread(impl, make_cache, trace, profile, page_size):
    """The previous test without hold points: the gap between one batch's end and the next one's start is only hit by racing.

    Many prefetches of one-page batches, each terminated once its first batch started, with the interpreter
    switching threads as often as it can: some terminates land between two batches, where only the
    re-check before a batch (begin_io) keeps the next one from starting. Catches a missing re-check
    most runs, never fails a correct implementation.
    """
    config = TerminationConfig(policy="best_effort", page_size=page_size)
    cache = make_cache(termination=config, batch_pages=1)
    requests = {f"r{i}": stored_request(cache, seed=200 + i, pages=2 * PAGES, page_size=page_size)[0] for i in range(RACES)}
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for request_id, tokens in requests.items():
            started = cache.prefetch(request_id, tokens)
            assert started == len(tokens), f"test setup: the prefetch of {request_id} started for {started} of its {len(tokens)} stored tokens"
            trace.wait_for_event(EventKind.IO_START, request_id, WAIT_S)
            assert request_id in cache.check_progress([request_id]), f"{profile.counterpart('D1')}: best_effort did not terminate {request_id} at its first check"
            trace.wait_for_event(EventKind.IO_DONE, request_id, WAIT_S)  # its IO thread is done with it
            cache.evict_all()  # room for the next race: a host tier need not hold every race's commit
    finally:
        sys.setswitchinterval(previous)
    late = {request_id: len(starts_after_terminate(trace, request_id)) for request_id in requests}
    late = {request_id: count for request_id, count in late.items() if count}
    assert not late, f"F1: transfers started after their prefetch was terminated (per request: {late})"
    close_and_check_trace(cache, trace, config)


@pytest.mark.needs("hold_points", "pool:swa")
@pytest.mark.io_order("kv_then_extras", "damages the window's pages while the first KV batch is held")
@pytest.mark.clause("F10", "S5")
@pytest.mark.parametrize("policy", ["wait_complete", "best_effort"])
def test_a_window_of_which_one_page_arrived_is_not_attached(impl, make_cache, trace, gate, tmp_path, policy, page_size):
    """One of the window's pages vanishes from storage after the existence check: the window arrives in part only."""
    storage = tmp_path / "window-storage"
    cache, config = make(make_cache, policy, storage_dir=storage, extra_pools=("swa",))
    require_pool(cache, impl, "swa")
    tokens, data = stored_request(cache, seed=74, pages=PAGES, page_size=page_size)
    window_files = sorted(pool_files(storage, "swa", trace))
    assert len(window_files) >= 2, f"test setup: expected the window's pages in storage, found {len(window_files)}"
    first_kv = gate.hold("first KV batch (after the existence check)", nth_of(trace, EventKind.IO_START, "kv", 1))
    assert cache.prefetch("r1", tokens) == len(tokens)
    first_kv.wait_reached()
    remove_files(window_files[-1:])  # the last page: the window before the match end now arrives short
    first_kv.release()
    cache.wait_prefetch_io("r1")
    committed = drive(cache, ["r1"], trace=trace)["r1"]
    inserted = [e for e in op_events(trace, "r1", EventKind.INSERT) if e.pool == "swa"]
    assert not inserted, f"F10: a window of which only some pages arrived was attached ({[e.describe() for e in inserted]})"
    loaded = cache.load_back(tokens)
    window = cache.pools["swa"].window_tokens
    if loaded.tokens and "swa" in loaded.data:
        assert loaded.tokens <= committed and loaded.data["swa"].shape[0] == min(window, loaded.tokens), (
            f"F10: a {loaded.tokens}-token match served {loaded.data['swa'].shape[0]} window rows")
    served(cache, tokens, data, committed)
    close_and_check_trace(cache, trace, config)
