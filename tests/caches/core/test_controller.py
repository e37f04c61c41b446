"""StorageController: real prefetch, IO and backup threads over a real FileStorage.

Pages are stored and read through tmp_path; threads are held and failed at
trace events with the conformance Gate (never sleeps); every wait is bounded.
"""

from __future__ import annotations

import queue
from dataclasses import dataclass

import pytest
import torch

from conformance.bounds import WAIT_S
from caches.core.allocator import PageAllocator
from caches.core.controller import BackupJob, StorageController
from caches.core.hashing import page_hashes
from caches.core.operation import PoolPlan, PrefetchOperation
from caches.core.pools import PoolSet, PoolSpec, tensor_bytes_view
from caches.core.reducer import LocalReducer
from caches.storage import FileStorage, PoolTransfer, pool_key
from conformance.gates import Gate
from conformance.scenarios.workload import random_rows
from spec import check
from spec.clock import ManualClock
from spec.fence import HitPolicy, committable_pages
from spec.trace import BACKUP, HOST, LOAD, EventKind, TraceRecorder, page_digest

PS = 4
HOST_PAGES = 16


@dataclass
class Stored:
    tokens: list[int]
    hashes: list[str]
    data: dict[str, torch.Tensor]


class Rig:
    """A controller with kv + indexer (+ mamba) host pools, a FileStorage and a trace gate."""

    def __init__(self, tmp_path, *, batch_pages: int = 2, threshold_pages: int = 1, mamba: bool = False) -> None:
        self.trace = TraceRecorder(ManualClock(0.0))
        self.gate = Gate(self.trace, timeout_s=WAIT_S)
        self.specs = [PoolSpec.kv((2, 3), torch.float32), PoolSpec.indexer((5,), torch.float16)]
        sizes = {"kv": HOST_PAGES * PS}
        if mamba:
            self.specs.append(PoolSpec.mamba((7,), torch.bfloat16))
            sizes["mamba"] = 4
        self.host = PoolSet.host(self.specs, sizes, "cpu")
        self.storage = FileStorage(tmp_path / "store")
        self.acks: queue.Queue[BackupJob] = queue.Queue()
        self.allocators = {"kv": PageAllocator(HOST_PAGES, PS, name="host kv"), "state": PageAllocator(4, 1, name="host state")}
        self.controller = StorageController(
            name="test", storage=self.storage, host_pools=self.host, page_size=PS, trace=self.trace,
            hit_reducer=LocalReducer(), batch_pages=batch_pages, threshold_pages=threshold_pages,
            on_backup_done=self.acks.put,
        )

    def store(self, pages: int, seed: int, *, mamba_at_end: bool = True) -> Stored:
        """Put pages straight into storage (independent of the backup thread)."""
        tokens = [seed * 1000 + i for i in range(pages * PS)]
        hashes = page_hashes(tokens, PS)
        data = {s.name: random_rows(pages * PS if s.unit == "token" else 1, s.elem_shape, s.dtype, seed + i) for i, s in enumerate(self.specs)}
        transfers = [PoolTransfer(pool, hashes, [data[pool][p * PS : (p + 1) * PS] for p in range(pages)]) for pool in ("kv", "indexer")]
        if "mamba" in data and mamba_at_end:
            transfers.append(PoolTransfer("mamba", hashes[-1:], [data["mamba"]]))
        assert all(all(r) for r in self.storage.set_v2(transfers))
        return Stored(tokens, hashes, data)

    def prefetch(self, stored: Stored, request_id: str = "r1", *, submit: bool = True) -> PrefetchOperation:
        slots = self.allocators["kv"].alloc(len(stored.tokens))
        extras = [PoolPlan("indexer", HitPolicy.ALL_PAGES, slots, "kv")]
        if "mamba" in self.host:
            extras.append(PoolPlan("mamba", HitPolicy.TRAILING_PAGES, self.allocators["state"].alloc(1), "state", per_page=False))
        for plan in [PoolPlan("kv", HitPolicy.ALL_PAGES, slots, "kv"), *extras]:
            self.trace.record(EventKind.ALLOC, op=request_id, pool=plan.pool, space=HOST, slots=plan.slots)
        op = PrefetchOperation(
            request_id, requested_hashes=stored.hashes, kv=PoolPlan("kv", HitPolicy.ALL_PAGES, slots, "kv"),
            extras=extras, page_size=PS, start_time=0.0, trace=self.trace,
            free_slots=lambda group, freed: self.allocators[group].free(freed),
        )
        if submit:
            self.controller.submit_prefetch(op)
        return op

    def host_rows(self, pool: str, slots: torch.Tensor) -> torch.Tensor:
        return self.host[pool].read(slots)

    def events(self, kind: EventKind, **match) -> list:
        return [e for e in self.trace.events() if e.kind is kind and all(getattr(e, k) == v for k, v in match.items())]

    def finish(self, op: PrefetchOperation) -> None:
        """What the cache does after terminate: release what was not inserted, then drain."""
        op.release_idle()
        op.drain()


def wait_io_done(op: PrefetchOperation) -> None:
    assert op.io_done.wait(WAIT_S), f"IO thread did not finish prefetch {op.request_id} within {WAIT_S}s"


def is_io_start(pool: str):
    return lambda e: e.kind is EventKind.IO_START and e.pool == pool and e.value == LOAD


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bytes(tensor_bytes_view(a.contiguous())) == bytes(tensor_bytes_view(b.contiguous()))


@pytest.fixture
def make_rig(tmp_path):
    rigs: list[Rig] = []

    def make(**kwargs) -> Rig:
        rig = Rig(tmp_path / f"rig{len(rigs)}", **kwargs)
        rigs.append(rig)
        return rig

    yield make
    for rig in rigs:
        rig.gate.close()
        rig.controller.close(WAIT_S)
        rig.storage.close()
        alive = [t.name for t in rig.controller.threads if t.is_alive()]
        assert not alive, f"controller threads still running after close(): {alive}"


def test_threads_are_named_after_the_controller(make_rig):
    rig = make_rig()
    assert sorted(t.name for t in rig.controller.threads) == ["test-backup", "test-io", "test-prefetch"]
    assert all(t.is_alive() for t in rig.controller.threads)


def test_backup_writes_every_pool_page_and_acknowledges(make_rig):
    rig = make_rig(mamba=True)
    pages = 3
    slots = rig.allocators["kv"].alloc(pages * PS)
    state = rig.allocators["state"].alloc(1)
    data = {s.name: random_rows(pages * PS if s.unit == "token" else 1, s.elem_shape, s.dtype, 40 + i) for i, s in enumerate(rig.specs)}
    for pool in ("kv", "indexer"):
        rig.host[pool].write(slots, data[pool])
    rig.host["mamba"].write(state, data["mamba"])
    hashes = page_hashes(list(range(pages * PS)), PS)
    job = BackupJob(node_id=1, hashes=hashes, slots={"kv": slots, "indexer": slots, "mamba": state},
                    per_page={"kv": True, "indexer": True, "mamba": False})
    rig.controller.submit_backup(job)
    acked = rig.acks.get(timeout=WAIT_S)
    assert acked is job
    assert job.results == {"kv": [True] * pages, "indexer": [True] * pages, "mamba": [True]}
    for pool in ("kv", "indexer"):
        assert rig.storage.exists_prefix([pool_key(h, pool) for h in hashes]) == pages
    # The state lives under the last page's key only.
    assert rig.storage.exists_prefix([pool_key(hashes[-1], "mamba")]) == 1
    assert rig.storage.exists_prefix([pool_key(hashes[0], "mamba")]) == 0
    written = {e.pool: e for e in rig.events(EventKind.PAGE_WRITE)}
    for p in range(pages):
        assert written["kv"].digests[p] == page_digest(tensor_bytes_view(data["kv"][p * PS : (p + 1) * PS].contiguous()))
    assert written["mamba"].keys == (pool_key(hashes[-1], "mamba"),)
    starts = rig.events(EventKind.IO_START, value=BACKUP)
    ends = rig.events(EventKind.IO_END)
    assert sorted(e.pool for e in starts) == ["indexer", "kv", "mamba"]
    assert {e.io for e in starts} == {e.io for e in ends} and all(e.value is True for e in ends)


def test_prefetch_loads_kv_batch_by_batch_then_the_extra_pools(make_rig):
    rig = make_rig(batch_pages=2)
    stored = rig.store(pages=5, seed=1)
    op = rig.prefetch(stored)
    wait_io_done(op)
    p = op.progress()
    assert len(p.hash_value) == 5 and p.completed_tokens == 5 * PS
    assert p.pool_transfers_done and not p.terminated and p.in_flight == {}
    assert [(pp.name, pp.completed_pages) for pp in p.pool_progress] == [("indexer", 5)]
    slots = op.plan("kv").slots
    for pool in ("kv", "indexer"):
        assert same_bytes(rig.host_rows(pool, slots), stored.data[pool]), f"{pool} bytes differ from storage"
    kinds = [(e.kind, e.pool) for e in rig.trace.events() if e.kind in (EventKind.IO_START, EventKind.IO_END, EventKind.IO_DONE)]
    kv_batches = [e for e in rig.events(EventKind.IO_START, pool="kv")]
    assert [len(e.slots) // PS for e in kv_batches] == [2, 2, 1]
    # The extra-pool get starts only after the last KV batch ended; IO_DONE comes last.
    last_kv_end = max(i for i, k in enumerate(kinds) if k == (EventKind.IO_END, "kv"))
    first_indexer = kinds.index((EventKind.IO_START, "indexer"))
    assert first_indexer > last_kv_end and kinds[-1] == (EventKind.IO_DONE, None)
    assert check(rig.trace.trace(), None, clauses=["S1", "S2", "S3", "F3"], closed=False) == []


def test_a_hit_below_the_threshold_revokes_without_any_io(make_rig):
    rig = make_rig(threshold_pages=3)
    stored = rig.store(pages=2, seed=2)
    op = rig.prefetch(stored)
    wait_io_done(op)
    assert op.revoked == "short_hit" and op.progress().terminated
    assert rig.events(EventKind.IO_START) == []
    assert op.drain() == 2 * PS
    assert rig.allocators["kv"].free_slots() == HOST_PAGES * PS
    assert check(rig.trace.trace(), None, clauses=["S1", "S2", "S3"]) == []


def test_the_hit_stops_at_the_first_page_an_all_pages_pool_lacks(make_rig):
    rig = make_rig()
    stored = rig.store(pages=4, seed=3)
    assert rig.storage.remove([pool_key(stored.hashes[2], "indexer")]) == 1
    op = rig.prefetch(stored)
    wait_io_done(op)
    assert [e.value for e in rig.events(EventKind.HIT)] == [2]
    assert op.progress().completed_tokens == 2 * PS
    assert op.drain() == 2 * PS  # pages beyond the hit went back


def test_a_kv_page_vanishing_after_the_hit_query_trims_the_hit(make_rig):
    rig = make_rig(batch_pages=1)
    stored = rig.store(pages=4, seed=4)
    hold = rig.gate.hold("first kv batch", is_io_start("kv"))
    op = rig.prefetch(stored)
    hold.wait_reached()
    assert rig.storage.remove([stored.hashes[2]]) == 1
    hold.release()
    wait_io_done(op)
    p = op.progress()
    assert [e.value for e in rig.events(EventKind.HIT)] == [4, 2]  # L1: waiting can end
    assert len(p.hash_value) == 2 and p.completed_tokens == 2 * PS
    assert [(pp.name, pp.completed_pages) for pp in p.pool_progress] == [("indexer", 2)]
    failed = rig.events(EventKind.IO_END, value=False)
    assert [e.slots for e in failed] == [tuple(op.plan("kv").slots[2 * PS : 3 * PS].tolist())]
    # The indexer get covered only the pages KV has.
    assert [len(e.slots) for e in rig.events(EventKind.IO_START, pool="indexer")] == [2 * PS]


def test_a_kv_miss_in_the_first_batch_revokes_the_operation(make_rig):
    rig = make_rig(batch_pages=2)
    stored = rig.store(pages=3, seed=5)
    hold = rig.gate.hold("first kv batch", is_io_start("kv"))
    op = rig.prefetch(stored)
    hold.wait_reached()
    rig.storage.remove([stored.hashes[0]])
    hold.release()
    wait_io_done(op)
    assert op.revoked == "io_failed" and op.progress().terminated
    assert rig.events(EventKind.IO_START, pool="indexer") == []
    rig.finish(op)
    assert rig.allocators["kv"].free_slots() == HOST_PAGES * PS
    assert check(rig.trace.trace(), None, clauses=["S1", "S2", "S3"]) == []


def test_an_indexer_page_vanishing_before_the_extra_get_clamps_the_commit(make_rig):
    """P6: the side pool comes back shorter than KV; F3 clamps to it."""
    rig = make_rig()
    stored = rig.store(pages=3, seed=6)
    hold = rig.gate.hold("indexer get", is_io_start("indexer"))
    op = rig.prefetch(stored)
    hold.wait_reached()
    rig.storage.remove([pool_key(stored.hashes[1], "indexer")])
    hold.release()
    wait_io_done(op)
    p = op.progress()
    assert p.completed_tokens == 3 * PS
    assert [(pp.name, pp.completed_pages) for pp in p.pool_progress] == [("indexer", 1)]
    assert committable_pages(p.completed_tokens // PS, p.pool_progress) == 1


def test_terminate_during_a_kv_batch_stops_io_and_the_batch_is_released_when_it_ends(make_rig):
    """F1, F5, S2: no IO after terminate; the held batch's slots go when its IO ends."""
    rig = make_rig(batch_pages=1)
    stored = rig.store(pages=3, seed=7)
    hold = rig.gate.hold("first kv batch", is_io_start("kv"))
    op = rig.prefetch(stored)
    hold.wait_reached()
    snapshot = op.terminate(step=1)
    first_page = op.plan("kv").slots[:PS].tolist()
    assert snapshot.completed_tokens == 0 and snapshot.in_flight == {"kv": frozenset(first_page)}
    op.release_idle()
    assert op.owned_slots() == {"kv": first_page}  # excluded, not freed (F5)
    hold.release()
    wait_io_done(op)
    assert op.owned_slots() == {}
    assert len(rig.events(EventKind.IO_START)) == 1
    assert op.progress().completed_tokens == 0
    op.drain()
    assert rig.allocators["kv"].free_slots() == HOST_PAGES * PS
    assert check(rig.trace.trace(), None, clauses=["S1", "S2", "S3"]) == []


def test_terminate_while_the_extra_pool_get_is_held(make_rig):
    """Window 2: KV done, extra get running; the fence commits nothing of it."""
    rig = make_rig()
    stored = rig.store(pages=2, seed=8)
    hold = rig.gate.hold("indexer get", is_io_start("indexer"))
    op = rig.prefetch(stored)
    hold.wait_reached()
    snapshot = op.terminate(step=1)
    assert snapshot.completed_tokens == 2 * PS and not snapshot.pool_transfers_done
    assert set(snapshot.in_flight) == {"indexer"}
    assert committable_pages(2, snapshot.pool_progress) == 0
    rig.finish(op)
    hold.release()
    wait_io_done(op)
    assert op.progress().pool_progress[0].completed_pages == 0  # the late end published nothing
    op.drain()
    assert rig.allocators["kv"].free_slots() == HOST_PAGES * PS
    assert check(rig.trace.trace(), None, clauses=["S1", "S2", "S3"]) == []


def test_an_injected_kv_fault_is_a_failed_transfer_and_the_thread_lives_on(make_rig):
    rig = make_rig(batch_pages=4)
    stored = rig.store(pages=2, seed=9)
    rig.gate.fail("kv read error", is_io_start("kv"))
    op = rig.prefetch(stored)
    wait_io_done(op)
    assert op.revoked == "io_failed"
    faults = rig.controller.fault_list()
    assert [(f.where, f.request_id) for f in faults] == [("kv_get", "r1")]
    assert "InjectedFault" in faults[0].error
    assert [e.value for e in rig.events(EventKind.IO_END)] == [False]
    # The same IO thread serves the next prefetch.
    op2 = rig.prefetch(rig.store(pages=1, seed=10), "r2")
    wait_io_done(op2)
    assert op2.progress().completed_tokens == PS and op2.revoked is None


def test_an_injected_extra_pool_fault_leaves_kv_complete_and_the_pool_empty(make_rig):
    rig = make_rig()
    stored = rig.store(pages=2, seed=11)
    rig.gate.fail("indexer read error", is_io_start("indexer"))
    op = rig.prefetch(stored)
    wait_io_done(op)
    p = op.progress()
    assert p.completed_tokens == 2 * PS and p.pool_progress[0].completed_pages == 0
    assert [f.where for f in rig.controller.fault_list()] == ["extra_pool_get"]
    assert rig.events(EventKind.IO_END, pool="indexer")[0].value is False


def test_a_backup_fault_is_acknowledged_as_failed(make_rig):
    rig = make_rig()
    slots = rig.allocators["kv"].alloc(PS)
    hashes = page_hashes(list(range(PS)), PS)
    rig.gate.fail("storage write error", lambda e: e.kind is EventKind.IO_START and e.value == BACKUP)
    job = BackupJob(node_id=1, hashes=hashes, slots={"kv": slots, "indexer": slots}, per_page={"kv": True, "indexer": True})
    rig.controller.submit_backup(job)
    assert rig.acks.get(timeout=WAIT_S) is job
    assert job.results == {"kv": [False], "indexer": [False]}
    assert [f.where for f in rig.controller.fault_list()] == ["backup"]
    assert rig.storage.exists_prefix(hashes) == 0
    assert all(e.value is False for e in rig.events(EventKind.IO_END))


def test_a_prefetch_aborted_before_its_hit_query_starts_no_io(make_rig):
    rig = make_rig()
    stored = rig.store(pages=2, seed=12)
    op = rig.prefetch(stored, submit=False)
    op.terminate(step=None)
    rig.controller.submit_prefetch(op)
    wait_io_done(op)
    assert rig.events(EventKind.IO_START) == [] and rig.events(EventKind.HIT) == []
    rig.finish(op)
    assert rig.allocators["kv"].free_slots() == HOST_PAGES * PS


def test_trailing_state_loads_only_at_the_loaded_length(make_rig):
    """TRAILING_PAGES: the state of the last loaded page, or nothing."""
    rig = make_rig(mamba=True, batch_pages=1)
    stored = rig.store(pages=3, seed=13)
    op = rig.prefetch(stored, "full")
    wait_io_done(op)
    by_pool = {pp.name: pp.completed_pages for pp in op.progress().pool_progress}
    assert by_pool == {"indexer": 3, "mamba": 3}
    assert same_bytes(rig.host_rows("mamba", op.plan("mamba").slots), stored.data["mamba"])

    stored = rig.store(pages=3, seed=14)
    hold = rig.gate.hold("first kv batch", lambda e: is_io_start("kv")(e) and e.op == "short")
    op = rig.prefetch(stored, "short")
    hold.wait_reached()
    rig.storage.remove([stored.hashes[2]])
    hold.release()
    wait_io_done(op)
    # Two pages loaded; no state is stored after page 2, so none is loaded.
    by_pool = {pp.name: pp.completed_pages for pp in op.progress().pool_progress}
    assert by_pool == {"indexer": 2, "mamba": 0}


def test_close_names_a_thread_held_in_a_gate(make_rig):
    rig = make_rig()
    stored = rig.store(pages=1, seed=15)
    hold = rig.gate.hold("kv batch", is_io_start("kv"))
    op = rig.prefetch(stored)
    hold.wait_reached()
    with pytest.raises(TimeoutError, match="test-io"):
        rig.controller.close(timeout_s=0.2)
    hold.release()
    wait_io_done(op)
    for thread in rig.controller.threads:
        thread.join(WAIT_S)
        assert not thread.is_alive(), f"{thread.name} did not stop after its hold was released"
