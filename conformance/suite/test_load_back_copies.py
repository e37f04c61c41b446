"""F9 with the copy running the other way, and a free that waited for a copy: it must still run once the copy ended.

The write-back direction is held in conformance/suite/test_fence.py. A
load-back copies every pool of a path (KV, a side pool on the same slot
numbers, a state, a window) as separate copies on one copy stream. When
the first fails, the path's device copy is garbage and is taken off the
device again, while the copies queued after it still write into those very
slots: their frees must wait. An implementation whose frees wait only for
copies to the host frees them at once, and the next allocation hands out
slots a copy is still writing.
"""

from __future__ import annotations

import pytest

from conformance.oracles.outcome import assert_loaded_bytes
from conformance.scenarios.copy_frees import frees_under_pending_copies
from conformance.scenarios.races import close_and_check_trace, stored_request
from conformance.scenarios.workload import assert_whole_commit, drive, request_data, request_tokens
from spec.config import TerminationConfig
from spec.trace import HOST, LOAD_BACK_COPY, WRITE_BACK_COPY, EventKind

PAGES = 4


def kv_load_back_copy(e) -> bool:
    return e.kind is EventKind.IO_START and e.value == LOAD_BACK_COPY and e.pool == "kv" and e.space == HOST


@pytest.mark.needs("held_copies", "extra_pools")
@pytest.mark.clause("F9", "S3", "S5")
def test_a_failed_load_back_frees_nothing_its_other_copies_still_write(impl, make_cache, trace, gate, device, page_size):
    """The KV copy of a load-back fails; the other pools' copies of the same path are still pending when it is handled."""
    if device != "cpu":
        pytest.skip(f"copies are failed on the CPU copy stream; on {device} a gate cannot fail one")
    config = TerminationConfig(policy="wait_complete", page_size=page_size)
    cache = make_cache(termination=config, batch_pages=2)
    tokens, data = stored_request(cache, seed=83, pages=PAGES, page_size=page_size)
    assert cache.prefetch("r1", tokens) == len(tokens)
    cache.wait_prefetch_io("r1")
    assert_whole_commit(drive(cache, ["r1"], trace=trace), "r1", len(tokens), "every page loaded")  # on the host only now
    gate.fail("the KV copy of the load-back fails", kv_load_back_copy)
    cache.load_back(tokens)
    copies = [e for e in trace.events() if e.kind is EventKind.IO_START and e.value == LOAD_BACK_COPY and e.space == HOST]
    failed = [e for e in trace.events() if e.kind is EventKind.IO_END and e.value is False and e.io in {c.io for c in copies}]
    assert failed, "test setup: the injected fault did not fail the KV load-back copy (no io_end with ok False)"
    if len({c.pool for c in copies}) < 2:
        pytest.skip(f"{impl.name}'s load-back of this prefix copies KV alone: no other copy is pending when it fails")
    early = list(frees_under_pending_copies(trace.events()))
    assert not early, f"F9: {early[0]}" + (f" (and {len(early) - 1} more)" if len(early) > 1 else "") + "; beside it, S3: a slot freed under IO"
    loaded = cache.load_back(tokens)  # no fault now: the path loads again, every pool its own bytes
    assert loaded.tokens == len(tokens), f"S5: after a failed load-back, loading {len(tokens)} host tokens again served {loaded.tokens}"
    assert_loaded_bytes(cache, loaded, data, len(tokens))
    close_and_check_trace(cache, trace, config)


def device_kv_allocated(cache) -> int:
    return cache.slot_accounting()["device:kv"][0]


@pytest.mark.needs("held_copies")
@pytest.mark.clause("F9", "F8")
def test_a_free_that_waited_for_a_copy_runs_once_the_copy_ended(impl, make_cache, trace, gate, device, page_size):
    """A duplicate write while the first write's backup copy is held: its slots wait, and return as soon as the copy ends.

    The copy is released and the cache closed: the close ends every copy, and
    a deferred free must then run, not wait for a later step that never comes.
    """
    if device != "cpu":
        pytest.skip(f"copies are held on the CPU copy stream; on {device} a gate cannot hold one")
    config = TerminationConfig(policy="wait_complete", page_size=page_size)
    cache = make_cache(termination=config, batch_pages=2)
    if "device:kv" not in cache.slot_accounting():
        pytest.skip(f"{impl.name} reports no 'device:kv' slot group")
    tokens = request_tokens(90, PAGES * page_size)
    data = request_data(cache, tokens, 90)
    held = gate.hold("the backup copy of the first write", lambda e: e.kind is EventKind.IO_START and e.value == WRITE_BACK_COPY and e.space == HOST)
    cache.write(tokens, data)
    held.wait_reached()
    kept = device_kv_allocated(cache)
    cache.write(tokens, data)  # a duplicate: its device slots are freed once no copy touches them
    held.release()
    cache.close()
    left = device_kv_allocated(cache)
    assert left == kept, (f"F8: {left - kept} device KV slots of the duplicate write were never returned: their free waited "
                          f"for the held copy (F9) and did not run once it ended")
    close_and_check_trace(cache, trace, config)
