"""Liveness: wait_complete ends once IO ends (L1); timeout ends within its bound (L2).

Time is the injected ManualClock: the deadline is crossed by advancing it,
never by sleeping. The held IO is the harness's gate.
"""

from __future__ import annotations

import math

import pytest

from conformance.scenarios.races import all_pages_extra_pools, assert_commit_within_fence, close_and_check_trace, io_start, op_events, served, stored_request

from conformance.oracles.outcome import trailing_pools
from conformance.oracles.outcome import assert_loaded_bytes
from spec.config import TerminationConfig
from spec.timeout import timeout_budget
from spec.trace import EventKind

PAGES = 4
BATCH = 2


def last_transfer(cache, trace):
    """The transfer that ends a prefetch's IO: the first extra-pool get, else the last KV batch."""
    extras = all_pages_extra_pools(cache) + trailing_pools(cache)
    if extras:
        return f"{extras[0]} get", io_start(extras[0])
    return "last KV batch", io_start("kv", nth=PAGES // BATCH, trace=trace)


@pytest.mark.clause("L1", "D4", "D5", "A1", "R1", "S5")
@pytest.mark.parametrize("policy", ["wait_complete", "timeout"])
def test_waiting_ends_at_the_first_check_after_io_ends(impl, make_cache, trace, gate, policy, profile, page_size):
    config = TerminationConfig(policy=policy, page_size=page_size)
    cache = make_cache(termination=config, batch_pages=BATCH)
    tokens, data = stored_request(cache, seed=21, pages=PAGES, page_size=page_size)
    description, predicate = last_transfer(cache, trace)
    held = gate.hold(description, predicate)
    assert cache.prefetch("r1", tokens) == len(tokens)
    held.wait_reached()
    # Held extra-pool get: KV is complete, transfers pending (D3); held KV batch: KV incomplete.
    clause = profile.counterpart("D3" if description.endswith(" get") else ("D4" if policy == "wait_complete" else "D5"))
    for _ in range(3):
        assert cache.check_progress(["r1"]) == {}, f"{clause}: stopped waiting with the {description} still running (before any deadline)"
    held.release()
    cache.wait_prefetch_io("r1")
    done = cache.check_progress(["r1"])
    assert done == {"r1": len(tokens)}, f"L1: the first check after every IO ended must commit the whole hit ({len(tokens)} tokens); got {done}"
    loaded = cache.load_back(tokens)
    assert loaded.tokens == len(tokens), f"L1: {loaded.tokens} of {len(tokens)} committed tokens were served"
    assert_loaded_bytes(cache, loaded, data, len(tokens))
    close_and_check_trace(cache, trace, config)


@pytest.mark.clause("L2", "T1", "T2", "A3", "F5", "F8", "S3")
@pytest.mark.parametrize("held_batch", [1, 2], ids=["first-batch-held", "second-batch-held"])
def test_timeout_ends_within_its_bound_excluding_io_in_flight(impl, make_cache, trace, gate, clock, held_batch, profile, page_size):
    # Binary fractions, so the deadline is exact on the clock.
    config = TerminationConfig(policy="timeout", page_size=page_size, timeout_base_s=2.0, timeout_per_ki_token_s=0.5, timeout_max_s=30.0)
    cache = make_cache(termination=config, batch_pages=BATCH)
    tokens, data = stored_request(cache, seed=22, pages=PAGES, page_size=page_size)
    held = gate.hold(f"KV batch {held_batch}", io_start("kv", nth=held_batch, trace=trace))
    assert cache.prefetch("r1", tokens) == len(tokens)
    held.wait_reached()
    start = op_events(trace, "r1", EventKind.OP_START)[0]
    started = float((start.value or {}).get("start", start.t))
    deadline = started + timeout_budget(config, PAGES)
    # This first check also starts the timer of a profile that starts it at the first blocked check, at the start time.
    assert cache.check_progress(["r1"]) == {}, f"{profile.counterpart('D5')}: stopped waiting before the deadline with KV incomplete"
    clock.set(deadline)
    assert cache.check_progress(["r1"]) == {}, (f"{profile.counterpart('T2')}: stopped waiting at exactly the deadline ({deadline - started}s "
                                                f"after start); timed out means strictly later")
    clock.set(math.nextafter(deadline, math.inf))
    done = cache.check_progress(["r1"])
    assert "r1" in done, "L2: a check past the deadline must terminate the prefetch"
    committed = assert_commit_within_fence(trace, cache, "r1", done["r1"], page_size, config)
    held.release()
    served(cache, tokens, data, committed)
    # Only what was committed stays in host memory; the held batch's slots came back when it ended.
    close_and_check_trace(cache, trace, config, host_slots_left=committed if not trailing_pools(cache) else None)
