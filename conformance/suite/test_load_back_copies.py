"""F9 with the copy running the other way: a load-back that fails while another of its copies is still pending.

The write-back direction is held in conformance/suite/test_fence.py. A
load-back copies every pool of a path (KV, a side pool on the same slot
numbers, a state, a window) as separate copies on one copy stream. When
the first fails, the path's device copy is garbage and is taken off the
device again, while the copies queued after it still write into those very
slots: their frees must wait. An implementation whose frees wait only for
copies to the host frees them at once, and the next allocation hands out
slots a copy is still writing. A free that waited runs once the copies
it waited for ended: by the time the load-back's copies are all done, the
path's device slots are free again.
"""

from __future__ import annotations

import pytest

from conformance.oracles.outcome import assert_loaded_bytes
from conformance.scenarios.copy_frees import device_kv_allocated, frees_under_pending_copies
from conformance.scenarios.races import close_and_check_trace, stored_request
from conformance.scenarios.workload import assert_whole_commit, drive
from spec.config import TerminationConfig
from spec.trace import HOST, LOAD_BACK_COPY, EventKind

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
    before = device_kv_allocated(cache)
    cache.load_back(tokens)
    copies = [e for e in trace.events() if e.kind is EventKind.IO_START and e.value == LOAD_BACK_COPY and e.space == HOST]
    failed = [e for e in trace.events() if e.kind is EventKind.IO_END and e.value is False and e.io in {c.io for c in copies}]
    assert failed, "test setup: the injected fault did not fail the KV load-back copy (no io_end with ok False)"
    if len({c.pool for c in copies}) < 2:
        pytest.skip(f"{impl.name}'s load-back of this prefix copies KV alone: no other copy is pending when it fails")
    early = list(frees_under_pending_copies(trace.events()))
    assert not early, f"F9: {early[0]}" + (f" (and {len(early) - 1} more)" if len(early) > 1 else "") + "; beside it, S3: a slot freed under IO"
    device, _ = cache.match(tokens)
    assert device == 0, (f"S5: the load-back's KV copy failed, yet {device} tokens of its path are still served from the device: "
                         f"what the failed copy left there is garbage")
    left = device_kv_allocated(cache)
    if left is not None:
        assert left == before, (f"F8: {left - before} device KV slots of the failed load-back's path still allocated once all its copies "
                                f"ended: their free waited for the copies (F9) and did not run when the last one ended")
    loaded = cache.load_back(tokens)  # no fault now: the path loads again, every pool its own bytes
    assert loaded.tokens == len(tokens), f"S5: after a failed load-back, loading {len(tokens)} host tokens again served {loaded.tokens}"
    assert_loaded_bytes(cache, loaded, data, len(tokens))
    close_and_check_trace(cache, trace, config)

