"""A bug on a background thread fails loudly; a storage fault stays a failed transfer.

The bug is a real one planted in the bookkeeping the prefetch thread does (the
trace recorder raising while the hit is recorded), not in a storage call: the
next scheduler call raises it, naming the thread, and keeps raising it; close()
still stops every thread and returns every slot. A storage raising is a fault:
recorded, the prefetch fails, the cache carries on.
"""

from __future__ import annotations

import pytest

from conformance.bounds import WAIT_S
from caches import BackgroundError
from conformance.gates import Gate
from spec.clock import ManualClock
from spec.trace import LOAD, EventKind, TraceRecorder

NAMES = ("hiradix", "unified_radix", "hi_mamba_radix")


class HitBookkeepingBug(TraceRecorder):
    def record(self, kind, **fields):
        if kind is EventKind.HIT:
            raise RuntimeError("planted bug: the hit could not be recorded")
        return super().record(kind, **fields)


@pytest.mark.parametrize("name", NAMES)
def test_a_bug_on_the_prefetch_thread_is_raised_by_the_next_scheduler_call(cache_factory, oracle, name):
    cache = cache_factory.build(name, trace=HitBookkeepingBug(ManualClock(0.0)), clock=ManualClock(0.0))
    cache_factory.expect_background_errors(cache)  # the planted bug, checked below
    tokens, _ = oracle.in_storage_only(cache, 41, 3)
    assert cache.prefetch_from_storage("r1", tokens) == len(tokens)
    # The failed operation was ended: nothing waits forever. (Waited on directly:
    # wait_prefetch_io itself refuses once the failure is recorded.)
    assert cache.ongoing_prefetch["r1"].io_done.wait(WAIT_S), "the failed prefetch was never ended"
    for call in (lambda: cache.check_prefetch_progress(["r1"]), lambda: cache.match_prefix(tokens), cache.flush):
        with pytest.raises(BackgroundError) as err:
            call()
        message = str(err.value)
        assert "prefetch" in message and "r1" in message and "RuntimeError: planted bug" in message, message
        assert isinstance(err.value.__cause__, RuntimeError)
    assert len(cache.background_errors()) == 1 and "planted bug" in cache.background_errors()[0]
    cache.close()
    oracle.assert_exact(cache)


@pytest.mark.parametrize("name", NAMES)
def test_a_storage_fault_is_recorded_and_the_cache_carries_on(cache_factory, oracle, name):
    trace = TraceRecorder(ManualClock(0.0))
    gate = Gate(trace)
    cache = cache_factory.build(name, trace=trace, clock=ManualClock(0.0))
    tokens, _ = oracle.in_storage_only(cache, 42, 3)
    gate.fail("storage raises", lambda e: e.kind is EventKind.IO_START and e.pool == "kv" and e.value == LOAD)
    assert cache.prefetch_from_storage("r1", tokens) == len(tokens)
    cache.wait_prefetch_io("r1")
    assert cache.check_prefetch_progress(["r1"]) == {"r1": 0}
    assert cache.background_errors() == []
    assert [f.where for f in cache.controller.fault_list()] == ["kv_get"]
    assert cache.prefetch_from_storage("r2", tokens) == len(tokens)  # the cache carries on
    cache.wait_prefetch_io("r2")
    assert cache.check_prefetch_progress(["r2"]) == {"r2": len(tokens)}
    gate.close()
