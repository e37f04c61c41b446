"""A load-back whose state finds no device slot: the path being loaded holds every one.

A state pool keeps one state per prefix end, on the device in few slots.
Load-back of a longer prefix pins its whole path, so the state of a
shorter prefix on that path, already on the device, cannot make room for
the longer one's. With one device state slot that is the only slot: the
longer prefix's state has none to go to. Its KV still loads; its state
must not, so the usable match ends where a state is on the device (the
shorter prefix's end, F4), with the bytes stored for it (S5). A load-back
that copies the state anyway has no slot to copy it to, or takes the one
the shorter prefix's end still points at (S5 when that prefix is matched
again).
"""

from __future__ import annotations

import pytest

from conformance.oracles.outcome import assert_loaded_writes
from conformance.scenarios.races import close_and_check_trace
from conformance.scenarios.workload import drive, request_data, request_tokens
from spec.config import TerminationConfig


@pytest.mark.needs("pool:mamba", "default_pool:mamba")
@pytest.mark.clause("F4", "S5", "S3")
def test_a_state_with_no_device_slot_is_not_loaded(impl, make_cache, trace, page_size):
    config = TerminationConfig(policy="wait_complete", page_size=page_size)
    cache = make_cache(termination=config, batch_pages=2, state_slots=1)
    longer = request_tokens(71, 4 * page_size)
    shorter = longer[: 2 * page_size]
    data = request_data(cache, longer, 71)
    short_data = {name: (rows if cache.pools[name].unit != "state" else request_data(cache, shorter, 72)[name])
                  for name, rows in data.items()}
    writes = {len(shorter): short_data, len(longer): data}
    for tokens, written in ((shorter, short_data), (longer, data)):
        cache.write(tokens, {name: (rows[: len(tokens)] if cache.pools[name].unit != "state" else rows)
                             for name, rows in written.items()})
        cache.flush()
    cache.evict_all()
    # Both prefixes back from storage to the host, each with the state at its end; nothing on the device.
    for request_id, tokens in (("r1", shorter), ("r2", longer)):
        if cache.prefetch(request_id, tokens):
            cache.wait_prefetch_io(request_id)
            drive(cache, [request_id], trace=trace)
    # The shorter prefix's state back on the device takes the one slot; the longer one's waits on the host.
    first = cache.load_back(shorter)
    if first.tokens != len(shorter) or not any(cache.pools[name].unit == "state" for name in first.data):
        pytest.skip(f"{impl.name} served {first.tokens} of the {len(shorter)} tokens of the shorter prefix, or no state with them: "
                    f"the one device state slot is not on the path, so the longer prefix's state has room")
    assert_loaded_writes(cache, first, writes)
    try:
        loaded = cache.load_back(longer)
    except AssertionError:
        raise
    except Exception as exc:
        raise AssertionError(f"F4: load-back of {len(longer)} tokens, whose state has no device slot (the one slot holds the state "
                             f"at {len(shorter)}, on the path being loaded), raised {type(exc).__name__}: {exc}; the usable "
                             f"match must end where a state is on the device") from None
    assert_loaded_writes(cache, loaded, writes)
    # The shorter prefix again: its state slot must still hold its own state, not the longer one's.
    assert_loaded_writes(cache, cache.load_back(shorter), writes)
    close_and_check_trace(cache, trace, config)
