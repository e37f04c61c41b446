"""A prefetch below a prefix held on the device alone: every host slot it brings must come back when that prefix goes.

The head of a request can be on the device with no host copy (a prefix hit
once under write_through_selective, or not yet acknowledged). A prefetch of
the rest must hang its pages where the tree can reach them again: below the
deepest backed-up node, never below the device-only head, which device
eviction deletes outright, taking with it the only path to the pages below
(host slots that never return, a hit nothing serves).
"""

from __future__ import annotations

import pytest

from conformance.scenarios.races import close_and_check_trace, stored_request
from conformance.scenarios.workload import drive, pool_data
from spec.config import TerminationConfig
from spec.trace import TraceRecorder

PAGES = 4
HEAD = 2  # pages of the request on the device only


@pytest.mark.clause("F8", "S3")
@pytest.mark.parametrize("policy", ["wait_complete", "best_effort"])
def test_a_prefetch_below_a_device_only_prefix_returns_every_host_slot(impl, make_cache, trace, clock, tmp_path, profile, policy, page_size):
    config = TerminationConfig(policy=policy, page_size=page_size)
    shared = tmp_path / "shared-storage"
    writer = make_cache(termination=config, storage_dir=shared, trace=TraceRecorder(clock, profile=profile.id))
    tokens, data = stored_request(writer, seed=93, pages=PAGES, page_size=page_size)
    writer.close()
    cache = make_cache(termination=config, storage_dir=shared, batch_pages=2, write_policy="write_through_selective")
    head = tokens[: HEAD * page_size]
    # The head's rows are the stored request's (the same prefix); a state pool's row is the head's own end state.
    states = pool_data([pool for pool in cache.pools.values() if pool.unit == "state"], len(head), 94)
    cache.write(head, {**{name: rows[: len(head)] for name, rows in data.items() if cache.pools[name].unit != "state"}, **states})
    if cache.match(head) != (len(head), 0):
        cache.close()
        pytest.skip(f"{impl.name} keeps a prefix written once elsewhere than on the device alone (match {cache.match(head)})")
    requested = cache.prefetch("r1", tokens)
    if requested:
        cache.wait_prefetch_io("r1")
        drive(cache, ["r1"], trace=trace)
    cache.evict_all()  # the head has no backup: device eviction deletes it
    device, host = cache.match(tokens)
    assert device + host == 0, f"F8: evict_all() left {device + host} tokens of the request matched"
    close_and_check_trace(cache, trace, config, host_slots_left=0)
