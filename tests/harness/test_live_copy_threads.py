"""The copy-thread layout (upstream before 2025-09-08) and the settings older trees fix, on hand-written upstream-shaped
samples (no upstream code): which layout a tree runs, the facts read from its lines (a fixed prefetch threshold, a fixed
batch and timeout, a MIN-reduced vote), and the taps of copies made on the controller's own threads."""

from __future__ import annotations

import queue
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from conformance.live import calls, shims
from conformance.live.adapter import adapters_for
from conformance.live.evidence import fixed_batch_of, fixed_threshold_of, profile_of, vote_reduce_of
from conformance.live.layouts.hiradix_threads.taps import CopyThreadsTaps, MinVotes, batch_functions
from conformance.live.taps import Taps
from conformance.live.taps.controller import release_site
from conformance.live.tree import locate
from spec.config import Policy, TerminationConfig
from spec.decision import VOTE_COLLECTIVE
from spec.trace import LOAD_BACK_COPY, WRITE_BACK_COPY, EventKind, TraceRecorder

OLD_HIRADIX = """
class HiRadixCache(RadixCache):
    def __init__(self, req_to_token_pool, token_to_kv_pool_allocator, tp_cache_group, page_size):
        # todo: customizable storage prefetch threshold and timeout
        self.prefetch_threshold = 256
        self.prefetch_timeout = 3  # seconds

    def can_terminate_prefetch(self, operation: PrefetchOperation):
        if self.tp_world_size > 1:
            can_terminate = torch.tensor(can_terminate, dtype=torch.int)
            torch.distributed.all_reduce(
                can_terminate,
                op=torch.distributed.ReduceOp.MIN,
                group=self.tp_group,
            )
        return can_terminate
"""
OLD_CONTROLLER = """
class HiCacheController:
    def write_thread_func_direct(self):
        pass

    def load_thread_func_layer_by_layer(self):
        pass

    def _page_transfer(self, operation):
        if self.is_mooncake_backend():
            get_func = self._mooncake_page_get
            batch_size = 128
        else:
            get_func = self._generic_page_get
            batch_size = 8
"""
def old_tree(root: Path, hiradix: str = OLD_HIRADIX, controller: str = OLD_CONTROLLER) -> Path:
    package = root / "sglang"
    for rel, text in {"__init__.py": "", "srt/mem_cache/hiradix_cache.py": hiradix, "srt/managers/cache_controller.py": controller}.items():
        (package / rel).parent.mkdir(parents=True, exist_ok=True)
        (package / rel).write_text(text)
    return root


# --- which layout, read from the tree ---------------------------------------------------------------

def test_a_controller_copying_on_its_own_threads_runs_the_copy_thread_layout_as_the_forks_row(tmp_path):
    tree = locate(f"{old_tree(tmp_path)}@old")
    assert tree.layouts == ("HiRadixCache/copy-threads",)
    (adapter,) = adapters_for(tree)
    assert adapter.name == "sglang-live:HiRadixCache@old", "the same row as the fork's later layout"


@pytest.mark.parametrize(("drop", "missing"), [("    def _page_transfer(self, operation):\n", "batched prefetch transfer (_page_transfer)"),
                                               ("    def write_thread_func_direct(self):\n", None)])
def test_a_tree_without_the_batch_transfer_or_without_the_copy_threads_is_not_the_copy_thread_layout(tmp_path, drop, missing):
    controller = OLD_CONTROLLER.replace(drop, "    def elsewhere(self):\n")
    if missing is None:  # no copy threads left: a controller without start_writing is still no layout the harness runs
        controller = controller.replace("    def load_thread_func_layer_by_layer(self):\n", "    def loader(self):\n")
    tree = locate(str(old_tree(tmp_path, controller=controller)))
    assert "HiRadixCache/copy-threads" not in tree.layouts
    if missing is not None:
        assert any(missing in line for line in tree.unwired), tree.unwired


def test_a_release_without_a_decision_is_not_the_copy_thread_layout(tmp_path):
    tree = locate(str(old_tree(tmp_path, hiradix="class HiRadixCache(RadixCache):\n    pass\n")))
    assert tree.layouts == ()
    assert any("termination decision (can_terminate_prefetch)" in line for line in tree.unwired), tree.unwired


# --- facts read from its lines ------------------------------------------------------------------------

def test_a_fixed_threshold_a_fixed_batch_and_a_min_reduced_vote_are_read_with_their_lines(tmp_path):
    tree = locate(str(old_tree(tmp_path)))
    threshold = fixed_threshold_of(tree, "HiRadixCache")
    assert (threshold.line, threshold.text) == (5, "self.prefetch_threshold = 256")
    batch = fixed_batch_of(tree)
    assert (batch.line, batch.text) == (15, "batch_size = 8"), "the generic get's branch, the file backend's"
    op, hit = vote_reduce_of(tree, "HiRadixCache")
    assert (op, hit.line) == ("MIN", 13)
    profile, why = profile_of(tree, "HiRadixCache")
    assert profile == "vote_per_check" and "one MIN all-reduce agrees it" in why[1]


def test_a_threshold_a_setting_supplies_and_a_batch_the_controller_sets_are_not_fixed(tmp_path):
    hiradix = OLD_HIRADIX.replace("self.prefetch_threshold = 256", "self.prefetch_threshold = prefetch_threshold")
    controller = OLD_CONTROLLER.replace("            batch_size = 128\n", "").replace("            batch_size = 8\n", "")
    tree = locate(str(old_tree(tmp_path, hiradix=hiradix, controller=controller)))
    assert fixed_threshold_of(tree, "HiRadixCache") is None
    assert fixed_batch_of(tree) is None


# --- the shims ------------------------------------------------------------------------------------------

class GetController:
    """A controller's generic get: each page of the batch lands (completed_tokens grows) unless it is in `missing`."""

    page_size = 4

    def __init__(self, missing: set[str] = frozenset()) -> None:
        self.missing = missing
        self.calls: list[list[str]] = []

    def _generic_page_get(self, operation, hash_values, host_indices):
        self.calls.append(list(hash_values))
        for i, key in enumerate(hash_values):
            if key in self.missing:
                break
            assert int(host_indices[i * self.page_size]) == operation.slot_of[key], "each page lands in its own slots"
            operation.completed_tokens += self.page_size


def operation_of(keys: list[str]) -> SimpleNamespace:
    return SimpleNamespace(completed_tokens=0, slot_of={key: 100 + 4 * i for i, key in enumerate(keys)})


def test_a_fixed_batch_is_split_into_the_tests_batches_each_a_call_of_its_own():
    cc, keys = GetController(), ["a", "b", "c", "d", "e"]
    shims.split_fixed_batch(cc, "_generic_page_get", 2)
    operation = operation_of(keys)
    cc._generic_page_get(operation, keys, torch.arange(100, 120))
    assert cc.calls == [["a", "b"], ["c", "d"], ["e"]]
    assert operation.completed_tokens == 20


def test_a_split_batch_stops_after_the_first_that_lands_short_as_the_transfer_does():
    cc, keys = GetController(missing={"c"}), ["a", "b", "c", "d"]
    shims.split_fixed_batch(cc, "_generic_page_get", 2)
    operation = operation_of(keys)
    cc._generic_page_get(operation, keys, torch.arange(100, 116))
    assert cc.calls == [["a", "b"], ["c", "d"]], "no storage call for a batch after a short one"
    assert operation.completed_tokens == 8


@pytest.mark.parametrize(("tokens", "controller"), [(8, 8), (2, 4)], ids=["pages", "below-a-page"])
def test_the_threshold_is_set_on_the_cache_and_as_its_controller_derives_it(tokens, controller):
    cache = SimpleNamespace(prefetch_threshold=256, cache_controller=SimpleNamespace(prefetch_threshold=256, page_size=4))
    shims.set_prefetch_threshold(cache, tokens)
    assert (cache.prefetch_threshold, cache.cache_controller.prefetch_threshold) == (tokens, controller)


# --- older operations and controllers -----------------------------------------------------------------

class DoneOperation:
    """A PrefetchOperation before 2025-09-08: its terminated flag is named done."""

    def __init__(self) -> None:
        self._done_flag = False

    def mark_done(self) -> None:
        self._done_flag = True

    def is_done(self) -> bool:
        return self._done_flag


def test_an_operation_whose_flag_is_named_done_is_terminated_through_it():
    operation = DoneOperation()
    assert not calls.is_terminated(operation) and calls.terminated_flag(operation) == "_done_flag"
    calls.mark_terminated(operation)
    assert calls.is_terminated(operation)


def test_a_controller_without_a_release_queue_releases_through_its_host_pool_and_names_its_generic_batch_functions():
    host = SimpleNamespace(free=lambda indices: None)
    old = SimpleNamespace(mem_pool_host=host, _generic_page_get=None, _generic_page_set=None)
    assert release_site(old) == (host, "free")
    assert batch_functions(old) == ("_generic_page_get", "_generic_page_set")
    later = SimpleNamespace(mem_pool_host=host, append_host_mem_release=None, page_get_func=None, page_set_func=None)
    assert release_site(later) == (later, "append_host_mem_release")
    assert batch_functions(later) == ("page_get_func", "page_set_func")


# --- the taps of the copy threads -------------------------------------------------------------------------

class HostPool:
    """The two copies the write and load threads make, on a host pool of two layers."""

    layer_num = 2

    def __init__(self) -> None:
        self.copied: list[tuple[str, int]] = []

    def backup_from_device_all_layer(self, device_pool, host_indices, device_indices, io_backend):
        self.copied.append(("write", -1))

    def load_to_device_per_layer(self, device_pool, host_indices, device_indices, layer_id, io_backend):
        self.copied.append(("load", layer_id))


def copy_taps() -> tuple[CopyThreadsTaps, HostPool, TraceRecorder, SimpleNamespace]:
    trace = TraceRecorder()
    taps = Taps(trace, TerminationConfig(policy=Policy.WAIT_COMPLETE, page_size=4), 4)
    host = HostPool()
    cc = SimpleNamespace(mem_pool_host=host, ack_load_queue=queue.Queue(), ack_write_queue=queue.Queue())
    copies = CopyThreadsTaps(taps, cc)
    copies.install()
    return copies, host, trace, cc


def test_a_write_threads_copy_and_a_load_over_every_layer_are_one_io_each_with_their_host_slots():
    copies, host, trace, _ = copy_taps()
    slots = torch.tensor([8, 9, 10, 11])
    host.backup_from_device_all_layer(None, slots, slots, "direct")
    host.load_to_device_per_layer(None, slots, slots, 0, "direct")
    assert trace.events()[-1].kind is EventKind.IO_START, "the load is open until its last layer"
    host.load_to_device_per_layer(None, slots, slots, 1, "direct")
    events = [(e.kind, e.value, e.slots) for e in trace.events()]
    assert events == [(EventKind.IO_START, WRITE_BACK_COPY, (8, 9, 10, 11)), (EventKind.IO_END, True, (8, 9, 10, 11)),
                      (EventKind.IO_START, LOAD_BACK_COPY, (8, 9, 10, 11)), (EventKind.IO_END, True, (8, 9, 10, 11))]
    assert host.copied == [("write", -1), ("load", 0), ("load", 1)]


def test_a_load_waits_for_the_load_threads_acknowledgement_and_not_past_its_death():
    copies, _, _, cc = copy_taps()
    acked = threading.Timer(0.05, lambda: cc.ack_load_queue.put(7))
    acked.start()
    assert copies.wait_loads({7}, 5.0, lambda: True)
    acked.join()
    assert cc.ack_load_queue.get_nowait() == 7, "the acknowledgement stays for the cache's loading_check"
    assert not copies.wait_loads({8}, 5.0, lambda: False), "a dead load thread never acknowledges"


def test_a_one_element_vote_reduced_by_min_is_the_vote_itself():
    trace = TraceRecorder()
    taps = Taps(trace, TerminationConfig(policy=Policy.WAIT_COMPLETE, page_size=4), 4)
    votes = MinVotes(taps, lambda operation: None)
    taps.ctx.op, taps.ctx.phase, taps.ctx.operation = "r1", "vote", SimpleNamespace(request_id="r1")
    votes.on_reduce(torch.tensor(1, dtype=torch.int))
    votes.on_reduce(torch.tensor(0, dtype=torch.int))
    assert [(e.kind, e.value) for e in trace.events()] == [(EventKind.VOTE, True), (EventKind.COLLECTIVE, VOTE_COLLECTIVE),
                                                          (EventKind.VOTE, False), (EventKind.COLLECTIVE, VOTE_COLLECTIVE)]


def test_a_fixed_timeout_is_the_budget_every_timeout_field_leaves_unread(tmp_path):
    from conformance.live.evidence import fixed_timeout_of, ignored_fields
    from conformance.live.layouts import BY_KEY

    tree = locate(str(old_tree(tmp_path)))
    seconds, hit = fixed_timeout_of(tree, "HiRadixCache")
    assert (seconds, hit.line) == (3.0, 6)
    ignored = ignored_fields(tree, BY_KEY["HiRadixCache/copy-threads"])
    assert sorted(ignored) == ["timeout_base_s", "timeout_max_s", "timeout_per_ki_token_s"]
    assert ignored["timeout_max_s"][0].startswith("sglang/srt/mem_cache/hiradix_cache.py:6: HiRadixCache.__init__ fixes its prefetch timeout")


def test_the_vote_of_a_class_with_a_fixed_timeout_is_timed_out_by_that_budget():
    from conformance.live.probes import decision_state
    from spec.clock import ManualClock

    clock = ManualClock()
    clock.set(100.0)
    env = SimpleNamespace(termination=TerminationConfig(policy=Policy.TIMEOUT, page_size=4), clock=clock)
    operation = SimpleNamespace(hash_value=["a", "b"], completed_tokens=4, start_time=97.5, is_terminated=lambda: False)
    assert decision_state(env, operation).timed_out, "2.5 s past the configured budget of about 2 s"
    assert not decision_state(env, operation, fixed_budget_s=3.0).timed_out, "the class's own 3 s budget has not run out"


WHOLE_CONTROLLER = """
class HiCacheController:
    def prefetch_io_aux_func(self):
        while not self.stop_event.is_set():
            operation = self.prefetch_buffer.get(block=True, timeout=1)
            self.generic_page_transfer(operation)
            if self.tp_world_size > 1:
                torch.distributed.barrier(group=self.prefetch_io_tp_group)
"""


def test_an_io_thread_waiting_for_its_peers_before_its_release_is_read_from_its_loop(tmp_path):
    from conformance.live.evidence import io_thread_barrier_of

    assert io_thread_barrier_of(locate(str(old_tree(tmp_path, controller=WHOLE_CONTROLLER)))).line == 8
    assert io_thread_barrier_of(locate(str(old_tree(tmp_path / "later")))) is None


class WholeController:
    """0.5.0/0.5.1's shape: one call loads a whole operation, a storage batch_get per batch, then counts and writes it."""

    page_size = 4

    def __init__(self, missing: set[str] = frozenset()) -> None:
        self.storage_backend = SimpleNamespace(batch_get=self._batch_get, batch_set=lambda keys, values: True)
        self.missing = missing
        self.batches: list[list[str]] = []

    def _batch_get(self, keys, targets):
        self.batches.append(list(keys))
        return None if set(keys) & self.missing else [object() for _ in keys]

    def generic_page_transfer(self, operation, batch_size=8):
        for i in range(0, len(operation.hash_value), batch_size):
            keys = operation.hash_value[i : i + batch_size]
            if self.storage_backend.batch_get(keys, [None] * len(keys)) is None:
                break
            operation.completed_tokens += self.page_size * len(keys)

    def generic_page_backup(self, operation, batch_size=8):
        pass


def test_a_whole_operation_transfer_is_one_io_per_batch_of_the_tests_size_ending_with_what_landed():
    from conformance.live.layouts.hiradix_threads.taps import WholeTransferTaps

    trace = TraceRecorder()
    taps = Taps(trace, TerminationConfig(policy=Policy.WAIT_COMPLETE, page_size=4), 4)
    cc = WholeController(missing={"c"})
    WholeTransferTaps(taps, cc, 2).install()
    operation = SimpleNamespace(request_id="r1", hash_value=["a", "b", "c", "d"], completed_tokens=0, host_indices=torch.arange(100, 116))
    cc.generic_page_transfer(operation)
    assert cc.batches == [["a", "b"], ["c", "d"]], "the test's batch of 2, not the default 8"
    ends = [(e.kind, e.slots[0] if e.slots else None, e.value) for e in trace.events() if e.kind in (EventKind.IO_START, EventKind.IO_END, EventKind.IO_DONE)]
    assert ends == [(EventKind.IO_START, 100, "storage_to_host"), (EventKind.IO_END, 100, True),
                    (EventKind.IO_START, 108, "storage_to_host"), (EventKind.IO_END, 108, False), (EventKind.IO_DONE, None, None)]
