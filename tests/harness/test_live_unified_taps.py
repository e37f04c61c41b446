"""The taps of conformance/live/layouts/unified/taps.py on hand-written objects shaped like 0.5.2x's UnifiedRadixCache.

The objects have upstream's method names and call shapes (an IO thread whose
_page_transfer calls page_get_func per batch, which returns the pages that
arrived; ACKs queued for a sync thread that forwards them; a vote that
MAX-reduces a one-element verdict; a commit that inserts through the tree
core), not its code.
"""

from __future__ import annotations

from collections import namedtuple
from queue import Queue
from types import SimpleNamespace

import torch

from conformance.live.layouts.unified import taps as unified
from conformance.live.taps import Taps
from spec.clock import ManualClock
from spec.config import TerminationConfig
from spec.decision import VOTE_COLLECTIVE
from spec.trace import LOAD, EventKind, TraceRecorder

PS = 4
Handle = namedtuple("Handle", "rid attempt_id")  # CacheRequestHandle's fields


def taps(policy: str = "timeout") -> Taps:
    return Taps(TraceRecorder(ManualClock()), TerminationConfig(policy=policy, page_size=PS), PS)


class Operation:
    def __init__(self, request_id: str, pages: int, host_indices=None) -> None:
        self.request_id = request_id
        self.handle = Handle(request_id, 0)
        self.hash_value = [f"h{i}" for i in range(pages)]
        self.host_indices = host_indices
        self.completed_tokens = 0


class Controller:
    """0.5.2x's shape: page_get_func returns the pages that arrived; every batch and the end are ACKs for the sync thread."""

    def __init__(self, arrive: int) -> None:
        self.arrive = arrive
        self.prefetch_sync_queue: Queue = Queue()
        self.ack_prefetch_queue: Queue = Queue()
        self.prefetch_hit_queue: Queue = Queue()

    def page_get_func(self, operation, hash_values, host_indices, extra_info=None) -> int:
        return max(0, min(len(hash_values), self.arrive - operation.landed))

    def _page_transfer(self, operation) -> int:
        operation.landed = 0
        for i in range(0, len(operation.hash_value), 2):
            batch = operation.hash_value[i : i + 2]
            operation.landed += self.page_get_func(operation, batch, operation.host_indices[i * PS : (i + len(batch)) * PS])
            self.prefetch_sync_queue.put(SimpleNamespace(rid=operation.request_id, completed_req=None))
        return operation.landed

    def io_thread(self, operation) -> None:
        try:
            self._page_transfer(operation)
        finally:
            self.prefetch_sync_queue.put(SimpleNamespace(rid=operation.request_id, completed_req=True))

    def sync_thread(self) -> None:
        while not self.prefetch_sync_queue.empty():
            self.ack_prefetch_queue.put(self.prefetch_sync_queue.get())


def tapped_controller(t: Taps, arrive: int) -> Controller:
    cc = Controller(arrive)
    cc.acks = unified.AckCounts()
    unified.tap_io_thread(t, cc, cc.acks)
    return cc


def events(t: Taps, kind: EventKind) -> list:
    return [e for e in t.trace.events() if e.kind is kind]


def test_a_batch_ends_in_the_pages_page_get_func_returned():
    t = taps()
    cc = tapped_controller(t, arrive=3)
    cc.io_thread(Operation("r1", pages=4, host_indices=torch.arange(16)))
    ends = [(list(e.slots), e.value) for e in events(t, EventKind.IO_END)]
    assert ends == [(list(range(8)), True), (list(range(8, 12)), True), (list(range(12, 16)), False)]
    assert [e.value for e in events(t, EventKind.IO_START)] == [LOAD, LOAD]


def test_the_hit_is_what_the_drain_allocated():
    t = taps()
    cc = SimpleNamespace(allocate_storage_hit=lambda operation, hit_tokens, **kw: (torch.arange(8), 8) if hit_tokens else (None, 0))
    unified.tap_hit_allocation(t, cc)
    cc.allocate_storage_hit(Operation("r1", pages=4), 16, allow_partial=True)  # 4 pages hit, 2 got host slots
    cc.allocate_storage_hit(Operation("r2", pages=4), 0)
    assert [(e.op, e.value) for e in events(t, EventKind.HIT)] == [("r1", 2)]


def test_io_done_is_the_queued_final_ack_not_the_transfer_returning():
    t = taps()
    cc = tapped_controller(t, arrive=4)
    operation = Operation("r1", pages=4, host_indices=torch.arange(16))
    cc._page_transfer(operation)
    assert events(t, EventKind.IO_DONE) == [], "the transfer returned; the IO thread has not sent its final ACK yet"
    cc.prefetch_sync_queue.put(SimpleNamespace(rid="r1", completed_req=True))
    assert [e.op for e in events(t, EventKind.IO_DONE)] == ["r1"]
    assert (cc.acks.queued, cc.acks.forwarded) == (3, 0), "the sync thread has forwarded none yet"
    cc.sync_thread()
    assert (cc.acks.queued, cc.acks.forwarded) == (3, 3)


def vote_cache(t: Taps, verdict: int) -> SimpleNamespace:
    cache = SimpleNamespace(ongoing_prefetch={})
    reduced = []

    def all_reduce_attn_groups(tensor, op):
        reduced.append(int(tensor.item()))

    def can_terminate(operation):
        tensor = torch.tensor(verdict, dtype=torch.int)  # upstream's 0-dim payload
        cache._all_reduce_attn_groups(tensor, "max")
        return bool(tensor.item())

    cache._all_reduce_attn_groups = all_reduce_attn_groups
    cache._can_terminate_prefetch = can_terminate
    cache.revoke_pending_prefetch = lambda request: cache.ongoing_prefetch.pop(request, None)
    cache._handle_prefetch_result = lambda operation: None
    cache.tree_core = SimpleNamespace(insert_host=lambda *a: None)
    cache.check_prefetch_progress = lambda request: True
    cache._sync_hicache_ready_counts = lambda: None
    unified.tap_unified_cache(t, cache, lambda operation: None)
    cache.reduced = reduced
    return cache


def test_the_vote_is_the_one_element_verdict_entering_the_max_reduce():
    for verdict in (0, 1):
        t = taps()
        cache = vote_cache(t, verdict)
        assert cache._can_terminate_prefetch(Operation("r1", 2)) is bool(verdict)
        (vote,) = events(t, EventKind.VOTE)
        assert vote.value is bool(verdict) and vote.op == "r1"
        assert [e.value for e in events(t, EventKind.COLLECTIVE)] == [VOTE_COLLECTIVE]
        assert cache.reduced == [verdict]


def commit_cache(t: Taps, result) -> SimpleNamespace:
    cache = vote_cache(t, 0)
    host = torch.arange(8)

    def handle(operation):
        if result is not None:
            cache.tree_core.insert_host("node", list(range(8)), host, operation.hash_value)

    cache._handle_prefetch_result = handle
    cache.tree_core = SimpleNamespace(insert_host=lambda *args: result)
    unified.tap_unified_cache(t, cache, lambda operation: None)
    return cache


def test_commit_inserts_what_the_tree_did_not_hold_already():
    t = taps()
    cache = commit_cache(t, SimpleNamespace(prefix_len=4, host_insert_dropped=False))
    cache._handle_prefetch_result(Operation("r1", 2))
    assert [e.value for e in events(t, EventKind.COMMIT)] == [8]
    assert [list(e.slots) for e in events(t, EventKind.INSERT)] == [[4, 5, 6, 7]]


def test_a_dropped_insert_inserts_nothing_and_a_discarded_result_commits_zero():
    t = taps()
    dropped = commit_cache(t, SimpleNamespace(prefix_len=0, host_insert_dropped=True))
    dropped._handle_prefetch_result(Operation("r1", 2))
    assert events(t, EventKind.INSERT) == []
    t = taps()
    discarded = commit_cache(t, None)
    discarded._handle_prefetch_result(Operation("r2", 2))
    assert [(e.op, e.value) for e in events(t, EventKind.COMMIT)] == [("r2", 0)]


def test_a_revoke_before_allocation_ends_its_io_and_an_abort_records_no_revoke():
    t = taps()
    cache = vote_cache(t, 0)
    request = Handle("r1", 0)
    cache.ongoing_prefetch[request] = SimpleNamespace(operation=Operation("r1", 2, host_indices=None))
    with t.io_done:
        t.started_ops.add("r1")
    cache.revoke_pending_prefetch(request)
    assert [e.op for e in events(t, EventKind.REVOKE)] == ["r1"]
    assert [e.op for e in events(t, EventKind.IO_DONE)] == ["r1"]
    t = taps()
    cache = vote_cache(t, 0)
    cache.ongoing_prefetch[Handle("r2", 0)] = SimpleNamespace(operation=Operation("r2", 2, host_indices=torch.arange(8)))
    with t.scheduling(op="r2", phase="abort"):
        cache.revoke_pending_prefetch(Handle("r2", 0))
    assert events(t, EventKind.REVOKE) == [] and events(t, EventKind.IO_DONE) == [], "an allocated operation's IO ends with its final ACK"


class KvHost:
    def get_data_page(self, slot: int, flat: bool = True):
        return torch.full((PS * 2,), float(slot))


def test_load_back_names_the_storage_key_a_slot_was_last_read_into_and_forgets_freed_slots():
    t = taps()
    t.file_name = lambda key: f"{key}.bin"
    t.saw_pages("kv", ["a", "b"], torch.arange(8))
    t.forget_slot("kv", 4)
    unified.record_load_back(t, "kv", KvHost(), torch.arange(8).tolist()[::PS])
    (load_back,) = events(t, EventKind.LOAD_BACK)
    assert list(load_back.slots) == [0] and list(load_back.keys) == ["a.bin"], "slot 4 was freed: its key is gone"


def Sidecar(name: str, unit: str, rides_kv_slots: bool = False) -> SimpleNamespace:
    """What side_hosts_of reads of a live sidecar: its pool, host pool, layout unit, and whether it rides the KV slots."""
    return SimpleNamespace(name=name, host=KvHost(), layout=SimpleNamespace(unit=unit), rides_kv_slots=rides_kv_slots)


class LoadingController:
    """A controller whose queued load carries KV pages and one side pool's state (a PoolTransfer of its own host pool)."""

    def __init__(self, pool_transfers):
        self.load_queue = [SimpleNamespace(host_indices=torch.arange(8), pool_transfers=pool_transfers)]
        self.started = 0

    def start_loading(self):
        self.started += 1


def test_a_load_back_of_a_side_pool_state_is_recorded_from_its_own_host_pool_and_key():
    t = taps()
    t.file_name = lambda key: f"{key}.bin"
    t.saw_pages("kv", ["a", "b"], torch.arange(8))
    t.saw_pages("mamba", ["b.mamba"], torch.tensor([3]))
    state = SimpleNamespace(name=SimpleNamespace(value="mamba"), host_indices=torch.tensor([3]))
    riding = SimpleNamespace(name=SimpleNamespace(value="indexer"), host_indices=None)  # on the KV slots: KV's record
    cc = LoadingController([state, riding])
    unified.tap_load_back(t, cc, KvHost(), {"mamba": (KvHost(), 1)})  # a state: one host slot per stored page
    cc.start_loading()
    loads = [(e.pool, list(e.slots), list(e.keys)) for e in events(t, EventKind.LOAD_BACK)]
    assert loads == [("kv", [0, 4], ["a.bin", "b.bin"]), ("mamba", [3], ["b.mamba.bin"])]
    assert cc.started == 1


def test_a_load_back_of_several_states_records_each_state_not_one_per_page_of_tokens():
    t = taps()
    t.file_name = lambda key: f"{key}.bin"
    t.saw_pages("kv", ["a", "b"], torch.arange(8))
    t.saw_pages("mamba", ["a.mamba"], torch.tensor([3]))
    t.saw_pages("mamba", ["b.mamba"], torch.tensor([5]))
    states = SimpleNamespace(name=SimpleNamespace(value="mamba"), host_indices=torch.tensor([3, 5]))
    cc = LoadingController([states])
    unified.tap_load_back(t, cc, KvHost(), unified.side_hosts_of([Sidecar("mamba", "state")], PS))
    cc.start_loading()
    loads = [(e.pool, list(e.slots)) for e in events(t, EventKind.LOAD_BACK)]
    assert loads[1] == ("mamba", [3, 5]), "a state pool holds one slot per stored page: every state is a load-back"
