"""Every way the implementation's scheduler drops a waiting request ends the request's prefetch (S2, F8).

A scheduler can drop a request waiting for its prefetch by more than one
path: an abort it received, a higher-priority request taking the request's
place, a waiting timeout. An adapter declares its paths (`abort_paths`; the
live adapter reads them from upstream's scheduler), and each runs here
through the instance's `abort_by`; an adapter declaring none runs its one
`abort`.
"""

from __future__ import annotations

import pytest

from conformance.adapter import abort_by, adapter_abort_paths
from conformance.bounds import WAIT_S
from conformance.gates import WatchedTrace
from conformance.scenarios.races import close_and_check_trace, io_start, op_events, stored_request
from conformance.scenarios.workload import drive
from spec.config import TerminationConfig
from spec.trace import EventKind

PAGES = 4
BATCH = 2


@pytest.fixture
def trace(clock, profile) -> WatchedTrace:
    """The harness's recorder, waking waiters on every event (the dropped request's IO end is awaited, never polled)."""
    return WatchedTrace(clock, profile=profile.id)


@pytest.mark.clause("S2", "F8", "F1", "S3")
def test_every_scheduler_abort_path_stops_the_prefetch_and_returns_every_slot(impl, abort_path, make_cache, trace, gate, page_size):
    """Each way the implementation's scheduler drops a waiting request (an abort it received, a higher-priority
    request taking the request's place, a waiting timeout) ends the request's prefetch: no transfer of it starts
    after the drop, and every slot returns. A path that tells the cache nothing leaves the IO loading into slots
    nobody reads; one that only marks the prefetch terminated leaves its slots held by an entry nobody ends.
    The drop is the request's abort, which the trace contract counts as a revoke: S2 forbids any IO after it."""
    how = str(adapter_abort_paths(impl)[abort_path])
    config = TerminationConfig(policy="best_effort", page_size=page_size)
    cache = make_cache(termination=config, batch_pages=BATCH)
    tokens, _ = stored_request(cache, seed=34, pages=PAGES, page_size=page_size)
    held = gate.hold("first KV batch", io_start("kv", op="r1"))
    assert cache.prefetch("r1", tokens) == len(tokens)
    held.wait_reached()
    dropped_after = trace.trace().events[-1].seq
    abort_by(impl, cache, "r1", abort_path)
    held.release()
    trace.wait_for_event(EventKind.IO_DONE, "r1", WAIT_S)  # whatever IO the drop left running has started by then
    late = [e for e in op_events(trace, "r1", EventKind.IO_START) if e.seq > dropped_after]
    broken = [f"S2: {len(late)} transfers of r1 started after {how}: {[e.describe() for e in late]}"] if late else []
    again = cache.prefetch("r2", tokens)  # a new request for the same tokens: nothing of the dropped one may stand in its way
    if again == len(tokens):
        cache.wait_prefetch_io("r2")
        drive(cache, ["r2"], trace=trace)
        cache.evict_all()  # r2's pages leave the host tier: what is still allocated there at close, nobody holds
    else:
        broken.append(f"F8: a new prefetch of the same tokens requested {again} of {len(tokens)} after {how} (the dropped "
                      f"request's slots, its ongoing entry or its share of the prefetch rate limit never returned)")
    try:
        close_and_check_trace(cache, trace, config, host_slots_left=0)
    except AssertionError as leak:  # both, where the path breaks both: the IO left running and the slots never returned
        broken.append(f"{str(leak).splitlines()[0]} (after {how})")
    assert not broken, "\n".join(broken)
