"""Reducers: LocalReducer (one rank) and TorchDistReducer over a real gloo group of world size 1.

Each gloo test initializes the default group on a TCP store bound to a free
port and destroys it afterwards, so tests stay independent in any order.
"""

from __future__ import annotations

import datetime

import pytest
import torch
import torch.distributed as dist

from caches.config import CacheConfig
from caches.core.reducer import LocalReducer, TorchDistReducer
from caches.hiradix import HiRadixCache
from spec import check
from spec.clock import ManualClock
from spec.decision import UNTRACKED_PAYLOAD, VOTE_COLLECTIVE
from spec.errors import ConfigError
from spec.fence import COMMIT_COLLECTIVE, HIT_COLLECTIVE
from spec.trace import EventKind, TraceRecorder

TIMEOUT = datetime.timedelta(seconds=20)


@pytest.fixture
def world():
    """The default process group: gloo, one rank, on a TCP store at a free port."""
    assert not dist.is_initialized(), "a previous test left a process group initialized"
    store = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=TIMEOUT)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1, timeout=TIMEOUT)
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


def collectives(trace: TraceRecorder) -> list[tuple]:
    return [(e.value, e.op, e.step) for e in trace.events() if e.kind is EventKind.COLLECTIVE]


def test_local_reducer_is_the_identity_on_one_rank():
    reducer = LocalReducer()
    assert (reducer.rank, reducer.world_size) == (0, 1)
    assert reducer.all_reduce_max([0, 1], name="vote_max") == [0, 1]
    assert reducer.all_reduce_min([True, 3], name="commit_min") == [1, 3]
    assert all(type(v) is int for v in reducer.all_reduce_min([True, 3], name="x"))
    assert repr(reducer) == "LocalReducer()"


def test_torch_dist_reducer_needs_an_initialized_group():
    if dist.is_initialized():
        pytest.skip("a process group is initialized in this process")
    with pytest.raises(ConfigError, match="invalid process_group") as err:
        TorchDistReducer(None, TraceRecorder())
    assert "\n" not in str(err.value)


def test_torch_dist_reducer_reduces_and_records_each_collective_first(world):
    trace = TraceRecorder(ManualClock(5.0))
    reducer = TorchDistReducer(world, trace)
    assert (reducer.rank, reducer.world_size) == (0, 1)
    assert reducer.all_reduce_max([1, 0], name=VOTE_COLLECTIVE, op="r1", step=3) == [1, 0]
    assert reducer.all_reduce_min([7], name=COMMIT_COLLECTIVE, op="r1", step=3) == [7]
    assert reducer.all_reduce_min([2], name="write_ack") == [2]
    assert collectives(trace) == [(VOTE_COLLECTIVE, "r1", 3), (COMMIT_COLLECTIVE, "r1", 3), ("write_ack", None, None)]
    assert repr(reducer) == "TorchDistReducer(rank=0, world_size=1, device='cpu')"


def test_torch_dist_reducer_works_on_a_subgroup(world):
    group = dist.new_group(ranks=[0], backend="gloo")
    reducer = TorchDistReducer(group, TraceRecorder())
    assert reducer.all_reduce_max([4, 9], name="m") == [4, 9]


def test_a_cache_on_a_process_group_runs_the_protocol_collectives(world, tmp_path):
    """X2, X4: one vote and one commit collective per check; an untracked id still joins both."""
    clock = ManualClock(100.0)
    trace = TraceRecorder(clock)
    config = CacheConfig(page_size=4, device_pages=8, host_pages=16, kv_elem_shape=(2, 2), extra_pools=("indexer",),
                         prefetch_policy="wait_complete", storage_path=str(tmp_path / "store"))
    tokens = list(range(1, 13))
    data = {"kv": torch.randn(12, 2, 2), "indexer": torch.randn(12, 8)}
    cache = HiRadixCache(config, trace=trace, clock=clock, process_group=world)
    try:
        assert isinstance(cache.reducer, TorchDistReducer) and cache.world_size == 1
        assert cache.controller.hit_reducer.group is not cache.reducer.group  # its own group for its own thread
        cache.write(tokens, data)
        cache.flush()
        cache.evict_all()
        assert cache.prefetch_from_storage("r1", tokens) == 12
        cache.wait_prefetch_io("r1")
        assert cache.check_prefetch_progress(["r1", "gone"]) == {"r1": 12}
        step = cache._step
        protocol = [c for c in collectives(trace) if c[0] in (VOTE_COLLECTIVE, COMMIT_COLLECTIVE, HIT_COLLECTIVE)]
        assert protocol == [
            (HIT_COLLECTIVE, "r1", None),
            (VOTE_COLLECTIVE, "r1", step), (COMMIT_COLLECTIVE, "r1", step),
            (VOTE_COLLECTIVE, "gone", step), (COMMIT_COLLECTIVE, "gone", step),
        ]
        assert UNTRACKED_PAYLOAD == (0, 1)
        loaded = cache.match_prefix(tokens)
        assert loaded.host_hit_tokens == 12
    finally:
        cache.close()
    assert check(trace.trace(), config.termination) == []
