"""The extra-pool and collective taps of conformance/live on hand-written upstream-shaped objects.

Shapes, not code: a backend with batch_get_v2/batch_set_v2 over registered
host pools answering one bool per key, a hybrid controller whose IO thread
runs the KV batches and then one multi-pool get, a cache whose commit attaches
a state to the new leaf through a host LRU list, a cache module calling
torch.distributed itself.
"""

from __future__ import annotations

import threading
import types
from dataclasses import dataclass, field

import pytest
import torch

from conformance.bounds import WAIT_S
from conformance.gates import Gate, InjectedFault
from conformance.live import collectives
from conformance.live.layouts.hi_mamba.sidecar import MambaStates
from host_pool_sample import HostPool

from conformance.live.taps import Taps
from conformance.live.taps.cache import Votes, tap_fork_cache
from conformance.live.taps.controller import tap_load_path
from conformance.live.taps.host import tap_attach, tap_host_pool
from conformance.live.taps.storage import tap_storage
from conformance.scenarios.races import io_start
from spec.clock import ManualClock
from spec.config import TerminationConfig
from spec.decision import VOTE_COLLECTIVE, DecisionState
from spec.invariants import check
from spec.trace import BACKUP, LOAD, EventKind, TraceRecorder

PS = 4


@dataclass
class Transfer:
    name: str
    host_indices: torch.Tensor | None
    keys: list = field(default_factory=list)


class StatePool:
    page_size = 1


class Backend:
    """batch_get_v2 / batch_set_v2 answer one bool per key, per pool; `answers` says which keys hit."""

    def __init__(self, answers: dict[str, list[bool]]) -> None:
        self.answers = answers
        self.registered_pools = {"mamba": StatePool()}
        self.calls: list[str] = []
        self.written: list[str] = []

    def batch_get_v2(self, transfers, extra_info=None):
        self.calls.append("get")
        return {t.name: list(self.answers[t.name]) for t in transfers}

    def batch_set_v2(self, transfers, extra_info=None):
        self.calls.append("set")
        for t in transfers:
            for key in t.keys:
                self.set(f"{key}.{t.name}", torch.zeros(3))
        return {t.name: [True] * len(t.keys) for t in transfers}

    def set(self, key, value=None):
        self.written.append(key)
        return True


class Operation:
    def __init__(self, request_id: str, pages: int, transfers: list) -> None:
        self.request_id = request_id
        self.hash_value = [f"h{i}" for i in range(pages)]
        self.completed_tokens = 0
        self.pool_transfers = transfers
        self.pool_transfers_done = not transfers
        self._terminated_flag = False
        self.start_time = 0.0

    def is_terminated(self) -> bool:
        return self._terminated_flag


class HybridController:
    """The IO thread's shape: KV batches, then the extra pools in one multi-pool get once KV is complete."""

    def __init__(self, backend: Backend) -> None:
        self.storage_backend = backend

    def page_get_func(self, operation, hash_values, host_indices, extra_info=None):
        operation.completed_tokens += len(hash_values) * PS

    def _page_transfer(self, operation):
        self.page_get_func(operation, operation.hash_value, torch.arange(len(operation.hash_value) * PS))
        if operation.pool_transfers and operation.completed_tokens == len(operation.hash_value) * PS:
            self.storage_backend.batch_get_v2(operation.pool_transfers)
        operation.pool_transfers_done = True

    def append_host_mem_release(self, host_indices=None, extra_pools=None):
        return None

    def io_thread(self, operation):
        self._page_transfer(operation)
        self.append_host_mem_release(torch.arange(0))


def rig(answers: dict[str, list[bool]], policy: str = "wait_complete"):
    trace = TraceRecorder(ManualClock(0.0))
    taps = Taps(trace, TerminationConfig(policy=policy, page_size=PS), PS)
    taps.pools.update({"kv", "mamba"})
    backend = Backend(answers)
    cc = HybridController(backend)
    tap_load_path(taps, cc)
    tap_storage(taps, backend, lambda key: f"{key}__0_1.bin")
    return taps, trace, backend, cc


def state_transfer(slot: int = 7) -> Transfer:
    return Transfer("mamba", torch.tensor([slot]), ["h3"])


@pytest.mark.parametrize("hit, ok", [(True, True), (False, False)], ids=["loaded", "missed"])
def test_the_pool_get_is_one_io_of_the_operation_ending_as_the_backend_answers(hit, ok):
    taps, trace, _, cc = rig({"mamba": [hit]})
    cc.io_thread(Operation("r1", pages=2, transfers=[state_transfer()]))
    got = [(e.kind, e.op, e.pool, e.slots, e.value) for e in trace.events() if e.pool == "mamba"]
    assert got == [(EventKind.IO_START, "r1", "mamba", (7,), LOAD), (EventKind.IO_END, "r1", "mamba", (7,), ok)]
    assert trace.events()[-1].kind is EventKind.IO_DONE, "the IO ends after the pool get, at the tail release"


def test_a_held_pool_get_parks_the_io_thread_before_the_backend_runs():
    _, trace, backend, cc = rig({"mamba": [True]})
    gate = Gate(trace, timeout_s=WAIT_S)
    held = gate.hold("mamba get", io_start("mamba"))
    operation = Operation("r1", pages=2, transfers=[state_transfer()])
    worker = threading.Thread(target=cc.io_thread, args=(operation,), daemon=True)
    worker.start()
    held.wait_reached()
    assert backend.calls == [] and not operation.pool_transfers_done, "the backend must not run while the get is held"
    held.release()
    worker.join(WAIT_S)
    assert backend.calls == ["get"] and operation.pool_transfers_done
    gate.close()


def test_a_fault_at_the_pool_get_fails_it_and_ends_the_io_thread_like_a_raising_backend():
    taps, trace, backend, cc = rig({"mamba": [True]})
    gate = Gate(trace)
    gate.fail("mamba get raises", io_start("mamba"))
    with pytest.raises(InjectedFault):
        cc.io_thread(Operation("r1", pages=2, transfers=[state_transfer()]))
    assert backend.calls == []
    ends = [(e.pool, e.value) for e in trace.events() if e.kind is EventKind.IO_END]
    assert ends == [("kv", True), ("mamba", False)]
    assert trace.events()[-1].kind is EventKind.IO_DONE and "InjectedFault" in taps.io_thread_errors[0]


def test_transfers_of_pools_the_harness_does_not_track_record_nothing():
    taps, trace, backend, cc = rig({"mamba": [True], "draft": [True]})
    cc.io_thread(Operation("r1", pages=2, transfers=[Transfer("draft", torch.tensor([1, 2]), ["h0", "h1"])]))
    assert backend.calls == ["get"]
    assert not [e for e in trace.events() if e.pool == "draft"]


def test_a_pool_backup_is_a_backup_io_and_its_pages_are_that_pools_writes():
    taps, trace, backend, _ = rig({"mamba": [True]})
    backend.batch_set_v2([Transfer("mamba", torch.tensor([3]), ["h9"])])
    io = [(e.kind, e.op, e.pool, e.value) for e in trace.events() if e.kind in (EventKind.IO_START, EventKind.IO_END)]
    assert io == [(EventKind.IO_START, None, "mamba", BACKUP), (EventKind.IO_END, None, "mamba", True)]
    writes = [(e.pool, e.keys) for e in trace.events() if e.kind is EventKind.PAGE_WRITE]
    assert writes == [("mamba", ("h9.mamba__0_1.bin",))]
    backend.set("h10", torch.zeros(3))
    assert [e.pool for e in trace.events() if e.kind is EventKind.PAGE_WRITE][-1] == "kv", "a key without a pool suffix is a KV page"


class LruList:
    def __init__(self) -> None:
        self.nodes: list = []

    def insert_mru(self, node) -> None:
        self.nodes.append(node)


class AttachingCache:
    """_insert_helper_host's shape: it attaches the state to the new leaf when told it loaded."""

    def __init__(self, lru: LruList) -> None:
        self.lru = lru

    def _insert_helper_host(self, node, key, host_value, hash_value, mamba_host_value=None, mamba_loaded=False):
        if mamba_host_value is not None and mamba_loaded:
            self.lru.insert_mru(types.SimpleNamespace(mamba_host_value=mamba_host_value.clone()))
        return 0

    def can_terminate_prefetch(self, operation):
        return True

    def check_prefetch_progress(self, req_id):
        return True

    def writing_check(self):
        return None

    loading_check = drain_storage_control_queues = writing_check


def test_a_state_attached_by_a_commit_is_inserted_by_its_operation_and_owned_by_the_tree_after():
    trace = TraceRecorder(ManualClock(0.0))
    taps = Taps(trace, TerminationConfig(policy="wait_complete", page_size=PS), PS)
    states = HostPool(4)
    tap_host_pool(taps, states, "mamba")
    lru = LruList()
    tap_attach(taps, lru, "mamba", "mamba_host_value")
    cache = AttachingCache(lru)
    tap_fork_cache(taps, cache, lambda op: None)
    with taps.scheduling(op="r1", phase="prefetch"):
        slot = states.alloc(1)
    lru.insert_mru(types.SimpleNamespace(mamba_host_value=torch.tensor([3])))  # outside a commit: no insert
    with taps.scheduling(op="r1", phase="commit"):
        cache._insert_helper_host(None, [0] * PS, torch.arange(PS), ["h0"], slot, True)
    inserts = [(e.op, e.pool, e.slots) for e in trace.events() if e.kind is EventKind.INSERT]
    assert inserts == [("r1", "mamba", (0,)), ("r1", "kv", (0, 1, 2, 3))]
    states.free(slot)
    frees = [(e.op, e.pool) for e in trace.events() if e.kind is EventKind.FREE]
    assert frees == [(None, "mamba")], "once attached, the state's slot is the tree's"
    assert not [v for v in check(trace.trace(), clauses=["S3"]) if v.clause == "S3"]


class OneRankCache:
    """HiMambaRadixCache's decision on one rank: no reduce, the decision is `vote or terminated`."""

    def __init__(self) -> None:
        self.seen_terminated: list[bool] = []

    def can_terminate_prefetch(self, operation):
        vote = operation.completed_tokens == len(operation.hash_value) * PS
        self.seen_terminated.append(operation.is_terminated())
        return vote or operation.is_terminated()


def decision_taps(cache) -> tuple[Taps, TraceRecorder]:
    trace = TraceRecorder(ManualClock(0.0))
    taps = Taps(trace, TerminationConfig(policy="wait_complete", page_size=PS), PS)

    def state(operation) -> DecisionState:
        return DecisionState(policy="wait_complete", page_size=PS, hit_pages=len(operation.hash_value), completed_tokens=operation.completed_tokens,
                             timed_out=False, pool_transfers_present=False, pool_transfers_done=True, terminated=operation.is_terminated())

    cache._insert_helper_host = cache.check_prefetch_progress = lambda *a: True
    cache.writing_check = cache.loading_check = cache.drain_storage_control_queues = lambda *a: None
    tap_fork_cache(taps, cache, state)
    return taps, trace


def test_one_rank_without_a_reduce_records_the_vote_before_the_terminated_flag_is_combined():
    cache = OneRankCache()
    taps, trace = decision_taps(cache)
    operation = Operation("r1", pages=2, transfers=[])
    operation._terminated_flag = True
    assert cache.can_terminate_prefetch(operation) is True, "terminated: the decision is terminate"
    (vote,) = [e for e in trace.events() if e.kind is EventKind.VOTE]
    assert vote.value is False and vote.state.terminated, "the vote that entered the combine: KV incomplete under wait_complete"
    assert operation.is_terminated(), "the probe is a copy: the operation stays terminated"
    assert not check(trace.trace(), clauses=["D"]), "the vote is the spec's: no false D4"


def test_an_operation_that_cannot_be_copied_unterminated_records_its_vote_without_a_state():
    cache = OneRankCache()
    taps, trace = decision_taps(cache)

    class Opaque(Operation):
        def __init__(self) -> None:
            super().__init__("r1", pages=2, transfers=[])
            del self._terminated_flag

        def is_terminated(self) -> bool:
            return True

    cache.can_terminate_prefetch(Opaque())
    (vote,) = [e for e in trace.events() if e.kind is EventKind.VOTE]
    assert vote.value is True and vote.state is None


def test_module_collectives_are_reported_to_the_active_taps_before_they_run(monkeypatch):
    ran: list[str] = []
    monkeypatch.setattr(torch.distributed, "all_reduce", lambda tensor, *a, **k: ran.append("all_reduce"))
    monkeypatch.setattr(torch.distributed, "barrier", lambda *a, **k: ran.append("barrier"))
    module = types.ModuleType("hi_mamba_radix_cache")
    module.torch = torch
    collectives.install(module)
    collectives.install(module)  # once per process, whatever the number of caches
    assert module.torch is collectives.OBSERVED_TORCH and module.torch.tensor is torch.tensor
    trace = TraceRecorder(ManualClock(0.0))
    taps = Taps(trace, TerminationConfig(policy="wait_complete", page_size=PS), PS)
    Votes(taps, lambda operation: None)  # the cache seam's collective observer, as every session installs it
    module.torch.distributed.all_reduce(torch.zeros(1))  # no active taps: runs, unrecorded
    with taps.scheduling(op="r1", phase="abort"):
        module.torch.distributed.barrier(group=None)
    with taps.scheduling(op="r2", phase="commit"):
        module.torch.distributed.all_reduce(torch.zeros(1), op=module.torch.distributed.ReduceOp.MIN)
    assert ran == ["all_reduce", "barrier", "all_reduce"]
    got = [(e.op, e.value) for e in trace.events() if e.kind is EventKind.COLLECTIVE]
    assert got == [("r1", "abort_barrier"), ("r2", "commit_min")]


def test_a_vote_reduce_through_the_module_records_the_vote_it_carries(monkeypatch):
    monkeypatch.setattr(torch.distributed, "all_reduce", lambda tensor, *a, **k: None)
    module = types.ModuleType("m")
    module.torch = torch
    collectives.install(module)

    class ReducingCache(OneRankCache):
        def can_terminate_prefetch(self, operation):
            states = torch.tensor([1, 0])  # votes no, not terminated
            module.torch.distributed.all_reduce(states)
            return states[0].item() == 0

    cache = ReducingCache()
    _, trace = decision_taps(cache)
    cache.can_terminate_prefetch(Operation("r1", pages=2, transfers=[]))
    kinds = [(e.kind, e.value) for e in trace.events()]
    assert kinds == [(EventKind.VOTE, False), (EventKind.COLLECTIVE, VOTE_COLLECTIVE)]


def test_mamba_state_bytes_round_trip_through_upstream_shaped_conv_and_temporal_tensors():
    states = MambaStates(types.SimpleNamespace(conv=[torch.zeros(2, 5, 12, 1, dtype=torch.bfloat16)], temporal=torch.zeros(2, 5, 2, 4, 2)))
    slot = torch.tensor([3])
    nbytes = sum(t.numel() * t.element_size() for t in states.tensors(slot))
    assert nbytes == 2 * 12 * 2 + 2 * 16 * 4 == states.nbytes()
    raw = torch.randint(0, 256, (nbytes,), dtype=torch.uint8)
    states.write(slot, raw)
    assert torch.equal(states.read(slot).reshape(-1), raw)
    assert not states.state.temporal[:, 2].any() and not states.state.conv[0][:, 4].any(), "other slots untouched"
