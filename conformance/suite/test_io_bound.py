"""L4: every transfer ends, done or failed, within the bound the implementation states.

A gate holds one transfer of a prefetch and never releases it until the end
of the test, so the transfer outlives its bound (`io_timeout_s`, on the
injected clock). Under wait_complete nothing but this bound can end the wait:
the check past the bound must stop waiting, commit nothing of the hung
transfer, keep its slots allocated while it still runs, and free them once
it really returns (F5). Time moves only by setting the ManualClock.
"""

from __future__ import annotations

import math

import pytest

from conformance.bounds import WAIT_S
from conformance.gates import WatchedTrace
from conformance.scenarios.races import all_pages_extra_pools, assert_commit_within_fence, close_and_check_trace, host_allocated, io_start, op_events, stored_request
from conformance.oracles.outcome import trailing_pools
from spec.config import TerminationConfig
from spec.trace import LOAD, Event, EventKind

PAGES = 4
BATCH = 2
BOUND_S = 8.0  # a binary fraction: the bound is exact on the clock


@pytest.fixture
def trace(clock, profile) -> WatchedTrace:
    """The harness's recorder, waking waiters on every event (the hung transfer's end is awaited, not polled)."""
    return WatchedTrace(clock, profile=profile.id)


def loads_in_flight(trace, op: str) -> list[Event]:
    """IO_STARTs of op's loads that have not ended (what a hold left running)."""
    ended = {e.io for e in op_events(trace, op, EventKind.IO_END)}
    return [e for e in op_events(trace, op, EventKind.IO_START) if e.value == LOAD and e.io not in ended]


def hold_past_the_bound(cache, trace, gate, clock, description: str, predicate, tokens, waiting_clause: str) -> tuple[object, list[Event], dict[str, int]]:
    """Prefetch with one transfer held; checks before, at and just past the bound; returns (hold, hung loads, what finished).

    waiting_clause: the clause that keeps the check waiting before the bound
    (D3: KV complete, a pool transfer pending; D4: KV incomplete).
    """
    held = gate.hold(description, predicate)
    assert cache.prefetch("r1", tokens) == len(tokens)
    started = held.wait_reached()
    hung = loads_in_flight(trace, "r1")
    assert hung, f"no load of r1 is in flight at the {description}"
    assert cache.check_progress(["r1"]) == {}, f"{waiting_clause}: stopped waiting with the {description} running, before any bound"
    bound = started.t + BOUND_S
    clock.set(bound)
    assert cache.check_progress(["r1"]) == {}, (
        f"L4: counted the {description} failed at exactly its bound ({BOUND_S}s after it started); only a transfer past it has failed"
    )
    clock.set(math.nextafter(bound, math.inf))
    done = cache.check_progress(["r1"])
    assert "r1" in done, (
        f"L4: under wait_complete the {description} ran past its {BOUND_S}s bound (io_timeout_s) and the wait did not end"
    )
    return held, hung, done


def assert_hung_pages_excluded_then_freed(cache, trace, held, hung: list[Event]) -> None:
    """Nothing the hung loads wrote enters the tree; their slots stay allocated while they run, and are freed once they end."""
    hung_slots = {(e.pool, slot) for e in hung for slot in e.slots}
    inserted = {(e.pool, slot) for e in op_events(trace, "r1", EventKind.INSERT) for slot in e.slots}
    assert not hung_slots & inserted, f"L4: slots {sorted(hung_slots & inserted)[:6]} of a transfer past its bound entered the tree"
    freed_early = {(e.pool, slot) for e in op_events(trace, "r1", EventKind.FREE) for slot in e.slots} & hung_slots
    assert not freed_early, f"F5: slots {sorted(freed_early)[:6]} freed while the transfer writing them still ran"
    still_held = host_allocated(cache)
    held.release()
    ios = {e.io for e in hung}
    trace.wait_until(
        lambda: ios <= {e.io for e in trace.events() if e.kind is EventKind.IO_END},
        WAIT_S,
        "the hung transfer's end after its release",
    )
    settled = cache.check_progress([])
    assert settled == {}, f"X4: a scheduler step over no requests reported {settled}"
    freed = {(e.pool, slot) for e in op_events(trace, "r1", EventKind.FREE) for slot in e.slots} & hung_slots
    assert freed == hung_slots, f"F5: slots {sorted(hung_slots - freed)[:6]} of the ended transfer were never freed"
    returned = still_held - host_allocated(cache)
    numbers = len({slot for e in hung for slot in e.slots if e.pool == "kv" or e.pool in all_pages_extra_pools(cache)})
    numbers += len({slot for e in hung for slot in e.slots if e.pool in trailing_pools(cache)})
    assert returned == numbers, (
        f"F5: {returned} host slots returned when the hung transfer ended; its {numbers} slot numbers were held until then"
    )


@pytest.mark.io_order("kv_then_extras", "holds the extra-pool get after all of KV")
@pytest.mark.clause("L4", "F3", "F11", "F5")
@pytest.mark.needs("extra_pools")
def test_a_sidecar_read_that_never_returns_ends_the_wait_at_its_bound(impl, make_cache, trace, gate, clock, profile, page_size):
    config = TerminationConfig(policy="wait_complete", page_size=page_size)
    cache = make_cache(termination=config, batch_pages=BATCH, io_timeout_s=BOUND_S)
    extras = all_pages_extra_pools(cache) + trailing_pools(cache)
    tokens, _ = stored_request(cache, seed=41, pages=PAGES, page_size=page_size)
    held, hung, done = hold_past_the_bound(cache, trace, gate, clock, f"{extras[0]} get", io_start(extras[0]), tokens, profile.counterpart("D3"))
    assert {e.pool for e in hung} <= set(extras), f"a KV load was still running while the {extras[0]} get was held: {hung}"
    assert_commit_within_fence(trace, cache, "r1", done["r1"], page_size, config)
    assert_hung_pages_excluded_then_freed(cache, trace, held, hung)
    close_and_check_trace(cache, trace, config)


@pytest.mark.io_order("kv_then_extras", "holds a KV batch with nothing else in flight")
@pytest.mark.clause("L4", "F3", "F11", "F5")
def test_a_kv_batch_that_never_returns_ends_the_wait_at_its_bound(impl, make_cache, trace, gate, clock, profile, page_size):
    config = TerminationConfig(policy="wait_complete", page_size=page_size)
    cache = make_cache(termination=config, batch_pages=BATCH, io_timeout_s=BOUND_S)
    tokens, _ = stored_request(cache, seed=42, pages=PAGES, page_size=page_size)
    held, hung, done = hold_past_the_bound(cache, trace, gate, clock, "second KV batch", io_start("kv", nth=2, trace=trace), tokens, profile.counterpart("D4"))
    assert {e.pool for e in hung} == {"kv"}, f"expected only the held KV batch in flight, got {[e.describe() for e in hung]}"
    committed = assert_commit_within_fence(trace, cache, "r1", done["r1"], page_size, config)
    assert committed <= BATCH * page_size, f"L4: committed {committed} tokens; the pages after the first batch were never loaded in time"
    assert_hung_pages_excluded_then_freed(cache, trace, held, hung)
    close_and_check_trace(cache, trace, config)
