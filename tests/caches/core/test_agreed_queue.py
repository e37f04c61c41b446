"""AgreedQueue: items filled by background threads, drained in counts every rank agrees on.

One rank: LocalReducer and a gloo group of world size 1. Two ranks: two real
processes on a gloo group, so the MIN is a real collective.
"""

from __future__ import annotations

import datetime
import threading

import pytest
import torch.distributed as dist

from conformance.bounds import WAIT_S
from caches.core.agreed_queue import AgreedQueue
from caches.core.reducer import LocalReducer, TorchDistReducer
from conformance.multirank.processes import run_ranks
from spec.trace import EventKind, TraceRecorder

TIMEOUT = datetime.timedelta(seconds=20)


def test_drain_takes_everything_in_order_on_one_rank():
    q: AgreedQueue[int] = AgreedQueue(LocalReducer(), "ack")
    assert q.drain() == [] and len(q) == 0
    for i in range(5):
        q.put(i)
    assert len(q) == 5
    assert q.drain(step=1) == [0, 1, 2, 3, 4]
    assert len(q) == 0 and q.drain() == []


def test_items_put_from_many_threads_are_drained_exactly_once():
    q: AgreedQueue[tuple[int, int]] = AgreedQueue(LocalReducer(), "ack")
    start = threading.Event()

    def producer(worker: int) -> None:
        if not start.wait(WAIT_S):
            return
        for i in range(200):
            q.put((worker, i))

    threads = [threading.Thread(target=producer, args=(w,), name=f"producer-{w}") for w in range(4)]
    for t in threads:
        t.start()
    start.set()
    drained = []
    for t in threads:
        t.join(WAIT_S)
        assert not t.is_alive(), f"{t.name} did not finish"
        drained += q.drain()
    drained += q.drain()
    assert sorted(drained) == [(w, i) for w in range(4) for i in range(200)]
    # Each producer's items keep their order.
    for w in range(4):
        assert [i for (x, i) in drained if x == w] == list(range(200))


def test_one_rank_on_a_process_group_drains_without_a_collective():
    assert not dist.is_initialized(), "a previous test left a process group initialized"
    store = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=TIMEOUT)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1, timeout=TIMEOUT)
    try:
        trace = TraceRecorder()
        q: AgreedQueue[str] = AgreedQueue(TorchDistReducer(dist.group.WORLD, trace), "ack")
        q.put("a")
        assert q.drain(step=1) == ["a"]
        assert [e for e in trace.events() if e.kind is EventKind.COLLECTIVE] == []
    finally:
        dist.destroy_process_group()


def take_the_minimum(env) -> dict:
    """One rank of the test below: rank 0 has 3 acks, rank 1 only 1; what each drained and which collectives ran."""
    trace = TraceRecorder(rank=env.rank)
    q: AgreedQueue[str] = AgreedQueue(TorchDistReducer(env.group, trace), "backup_ack")
    for i in range(3 if env.rank == 0 else 1):
        q.put(f"job{i}")
    first = q.drain(step=1)  # both take MIN = 1
    if env.rank == 1:  # rank 1 catches up: both take the 2 left on rank 0
        q.put("job1")
        q.put("job2")
    second = q.drain(step=2)
    third = q.drain(step=3)  # nothing anywhere: still one collective
    calls = [[e.value, e.step] for e in trace.events() if e.kind is EventKind.COLLECTIVE]
    return {"drains": [first, second, third], "left": len(q), "collectives": calls}


@pytest.mark.slow
def test_two_ranks_take_the_minimum_and_always_join_the_collective(tmp_path):
    # The parent hosts the store and outlives both ranks (processes.py says why a rank must not host it).
    results = run_ranks(f"{__file__}:take_the_minimum", 2, workdir=tmp_path)
    for rank in (0, 1):
        assert results[rank]["drains"] == [["job0"], ["job1", "job2"], []], f"rank {rank}"
        assert results[rank]["left"] == 0
        assert results[rank]["collectives"] == [["backup_ack", 1], ["backup_ack", 2], ["backup_ack", 3]]
