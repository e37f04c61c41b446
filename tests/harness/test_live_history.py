"""What lets the live harness reach upstream's older trees, on hand-written upstream-shaped samples (no upstream code):
moved modules found by what they define, the sgl-kernel stand-in and the driven path it must stay off, CUDA streams on
CPU, the older call shapes, a constructor taking its settings as arguments, the controller's storage batch size."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import queue
import sys
import threading
import types
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from conformance.live import calls, shims
from conformance.live.construct import LiveBuildError, build_from_arguments, scheduler_fields
from conformance.live.layout import Module
from conformance.live.modules import locate_module
from conformance.live.tree import locate


def package(root: Path, files: dict[str, str]) -> Path:
    sglang = root / "sglang"
    for rel, text in {"__init__.py": "", **files}.items():
        (sglang / rel).parent.mkdir(parents=True, exist_ok=True)
        (sglang / rel).write_text(text)
    return sglang


# --- moved modules ---------------------------------------------------------------------------------

def test_a_module_upstream_moved_is_found_where_the_tree_defines_the_name(tmp_path):
    sglang = package(tmp_path, {"srt/mem_cache/allocator/__init__.py": "", "srt/mem_cache/allocator/paged.py": "",
                                "srt/mem_cache/swa_memory_pool.py": "import torch\n\n\nclass SWATokenToKVPoolAllocator(Base):\n    pass\n"})
    located = locate_module(sglang, Module("sglang.srt.mem_cache.allocator.swa", "SWATokenToKVPoolAllocator"))
    assert located.dotted == "sglang.srt.mem_cache.swa_memory_pool"
    assert located.evidence == ("sglang.srt.mem_cache.allocator.swa is not in this tree; sglang/srt/mem_cache/swa_memory_pool.py:4 "
                                "defines SWATokenToKVPoolAllocator, so it is imported from sglang.srt.mem_cache.swa_memory_pool")


def test_a_module_under_its_own_name_is_never_searched_and_a_name_defined_nowhere_keeps_the_dotted_name(tmp_path):
    sglang = package(tmp_path, {"srt/mem_cache/allocator.py": "class Other:\n    pass\n",
                                "srt/elsewhere.py": "class PagedTokenToKVPoolAllocator:\n    pass\n"})
    assert locate_module(sglang, Module("sglang.srt.mem_cache.allocator", "PagedTokenToKVPoolAllocator")).evidence is None
    gone = locate_module(sglang, Module("sglang.srt.mem_cache.gone", "NothingDefinesThis"))
    assert (gone.dotted, gone.evidence) == ("sglang.srt.mem_cache.gone", None), "its import then names the module missing"


def test_of_several_definitions_the_one_nearest_the_dotted_name_is_taken(tmp_path):
    sglang = package(tmp_path, {"srt/layers/pool.py": "class MambaPool:\n    pass\n",
                                "srt/mem_cache/memory_pool.py": "class MambaPool:\n    pass\n"})
    assert locate_module(sglang, Module("sglang.srt.mem_cache.mamba_pool", "MambaPool")).dotted == "sglang.srt.mem_cache.memory_pool"


# --- sgl-kernel-stand-in ---------------------------------------------------------------------------

def stand_in_module(name: str) -> types.ModuleType:
    finder = shims.SglKernelStandIn()  # not installed: the test process keeps its own import system
    return finder.create_module(finder.find_spec(name, None))


def test_the_sgl_kernel_stand_in_serves_its_names_and_raises_one_line_when_one_is_called():
    kvcacheio = stand_in_module("sgl_kernel.kvcacheio")
    transfer = kvcacheio.transfer_kv_per_layer  # what `from sgl_kernel.kvcacheio import ...` binds
    with pytest.raises(shims.StandInCalled, match=r"^sgl_kernel.kvcacheio.transfer_kv_per_layer: a GPU-only kernel of sgl_kernel"):
        transfer()
    assert shims.SglKernelStandIn().find_spec("sgl_kernel_npu", None) is None


HOST_POOL = '''
def transfer_kv_direct(*args):
    raise AssertionError("the module's own name")


class MHATokenToKVPoolHost:
    def load_to_device_per_layer(self, device_pool, host_indices, device_indices, layer_id, io_backend):
        if io_backend == "kernel":
            transfer_kv_per_layer(host_indices, device_indices)
        elif io_backend == "direct":
            transfer_kv_direct(host_indices, device_indices)
'''


def host_pool_module(tmp_path: Path, name: str) -> types.ModuleType:
    (tmp_path / f"{name}.py").write_text(HOST_POOL)
    sys.path.insert(0, str(tmp_path))
    try:
        module = importlib.import_module(name)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop(name, None)
    kvcacheio = stand_in_module("sgl_kernel.kvcacheio")
    module.transfer_kv_per_layer, module.transfer_kv_direct = kvcacheio.transfer_kv_per_layer, kvcacheio.transfer_kv_direct
    return module


def test_a_stand_in_on_the_direct_backends_path_is_named_until_the_direct_copy_shim_replaces_it(tmp_path):
    module = host_pool_module(tmp_path, "upstream_shaped_host_pool")
    assert shims.stand_ins_on_direct_path(module) == ["upstream_shaped_host_pool.py:11: transfer_kv_direct"], \
        "the kernel backend's call is not the harness's path"
    shims.install_direct_copy(module, shims.DirectCopy())
    assert shims.stand_ins_on_direct_path(module) == []


# --- cpu-streams -------------------------------------------------------------------------------------

CONTROLLER = '''
import torch


class HiCacheController:
    def __init__(self):
        self.write_stream = torch.cuda.Stream()

    def start_writing(self):
        start_event = torch.cuda.Event()
        start_event.record()
        with torch.cuda.stream(self.write_stream):
            start_event.wait(self.write_stream)
        torch.cuda.current_stream().synchronize()
        return torch.zeros(2)
'''


def test_a_controller_that_makes_cuda_streams_itself_gets_torch_cpus_and_says_where(tmp_path):
    (tmp_path / "upstream_shaped_controller.py").write_text(CONTROLLER)
    sys.path.insert(0, str(tmp_path))
    try:
        module = importlib.import_module("upstream_shaped_controller")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("upstream_shaped_controller", None)
    with pytest.raises((RuntimeError, AssertionError)):
        module.HiCacheController()  # what a CPU build of torch does without the shim
    assert shims.install_cpu_streams(module) == "upstream_shaped_controller.py:7: `self.write_stream = torch.cuda.Stream()`"
    assert torch.equal(module.HiCacheController().start_writing(), torch.zeros(2))
    assert module.torch.cuda.is_available() is torch.cuda.is_available(), "every other torch.cuda name is torch.cuda's own"
    assert shims.install_cpu_streams(types.ModuleType("plain")) is None


# --- the older call shapes -------------------------------------------------------------------------------

class OlderCache:
    """A 2025-shaped cache: token lists, positional arguments, no abort release, no shutdown."""

    def __init__(self) -> None:
        self.calls: list = []
        self.prefetch_loaded_tokens_by_reqid = {"r1": 8}

    def match_prefix(self, key, **kwargs):
        self.calls.append(("match", key))

    def insert(self, key, value=None):
        self.calls.append(("insert", key))
        return 4

    def evict(self, num_tokens):
        self.calls.append(("evict", num_tokens))

    def init_load_back(self, last_node, host_hit_length, mem_quota=None):
        self.calls.append(("load", last_node, host_hit_length))
        return torch.arange(2), last_node


class NewerCache(OlderCache):
    def insert(self, params):
        self.calls.append(("insert", params.key))
        return SimpleNamespace(prefix_len=0)


def runtime_with(radix_key: bool) -> SimpleNamespace:
    radix_cache = SimpleNamespace(RadixKey=lambda tokens: ("key", tuple(tokens))) if radix_key else SimpleNamespace()
    params = SimpleNamespace(InsertParams=lambda **fields: SimpleNamespace(**fields))
    return SimpleNamespace(module={"radix_cache": radix_cache, "base_prefix_cache": params}.__getitem__)


def test_each_call_takes_the_shape_the_trees_own_signature_asks_for():
    older, newer = OlderCache(), NewerCache()
    assert calls.insert(runtime_with(False), older, calls.radix_key(runtime_with(False), [1, 2, 3, 4]), torch.arange(4)) == 4
    assert calls.insert(runtime_with(True), newer, calls.radix_key(runtime_with(True), [1, 2]), torch.arange(2)) == 0
    calls.evict(runtime_with(False), older, 12)
    match = SimpleNamespace(last_host_node="node", host_hit_length=8)  # no best_match_node: the older MatchResult
    assert torch.equal(calls.init_load_back(runtime_with(False), older, match), torch.arange(2))
    assert older.calls == [("insert", [1, 2, 3, 4]), ("evict", 12), ("load", "node", 8)]
    assert newer.calls == [("insert", ("key", (1, 2)))]



@pytest.mark.parametrize("field", ["last_host_node", "best_match_node"])
def test_a_load_back_names_the_node_as_the_trees_params_object_does(field):
    @dataclasses.dataclass
    class InitLoadBackParams:
        host_hit_length: int
        mem_quota: int | None = None

    fields = InitLoadBackParams.__dataclass_fields__
    params_class = dataclasses.make_dataclass("InitLoadBackParams", [(field, object)] + [(n, f.type, f) for n, f in fields.items()])
    cache = SimpleNamespace(init_load_back=lambda params: (getattr(params, field), None))
    cache.init_load_back.__signature__ = inspect.Signature([inspect.Parameter("params", inspect.Parameter.POSITIONAL_OR_KEYWORD)])
    runtime = SimpleNamespace(module={"base_prefix_cache": SimpleNamespace(InitLoadBackParams=params_class)}.__getitem__)
    assert calls.init_load_back(runtime, cache, SimpleNamespace(best_match_node="node", host_hit_length=8)) == "node"


def test_an_older_scheduler_tells_the_cache_nothing_of_an_abort_and_pops_the_loaded_count_itself():
    cache = OlderCache()
    assert calls.release_aborted(cache, "r1") is False
    calls.pop_loaded_tokens(cache, "r1")
    assert cache.prefetch_loaded_tokens_by_reqid == {}


def test_a_cache_without_shutdown_stops_its_controllers_storage_threads_with_the_wake_up_their_loops_skip():
    stop = threading.Event()
    prefetch_queue: queue.Queue = queue.Queue()
    taken = []

    def loop() -> None:  # upstream's shape: a 1 s poll, None skipped
        while not stop.is_set():
            try:
                item = prefetch_queue.get(block=True, timeout=60)
            except queue.Empty:
                continue
            taken.append(item)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    cc = SimpleNamespace(stop_event=stop, enable_storage=True, prefetch_queue=prefetch_queue, backup_queue=queue.Queue(),
                         prefetch_thread=thread, backup_thread=None)
    calls.shutdown(SimpleNamespace(cache_controller=cc), join_s=10.0)
    assert not thread.is_alive() and taken == [None]


# --- a constructor taking its parts and settings as arguments ---------------------------------------------------

SCHEDULER = '''
            if self.enable_hierarchical_cache:
                self.tree_cache = HiRadixCache(
                    req_to_token_pool=self.req_to_token_pool,
                    page_size=self.page_size,
                    hicache_ratio=server_args.hicache_ratio,
                    enable_metrics=self.enable_metrics,
                    storage_backend_extra_config=server_args.hicache_storage_backend_extra_config,
                )
'''


class HiRadixCache:
    def __init__(self, req_to_token_pool, page_size, hicache_ratio, storage_backend_extra_config=None, enable_metrics=False):
        self.built = dict(req_to_token_pool=req_to_token_pool, page_size=page_size, hicache_ratio=hicache_ratio,
                          storage_backend_extra_config=storage_backend_extra_config, enable_metrics=enable_metrics)


def test_an_older_constructor_is_fed_as_the_trees_scheduler_feeds_it(tmp_path):
    package(tmp_path, {"srt/managers/scheduler.py": SCHEDULER, "srt/mem_cache/hiradix_cache.py": "class HiRadixCache:\n    pass\n"})
    tree = locate(str(tmp_path))
    assert scheduler_fields(tree, "HiRadixCache") == {"hicache_ratio": "hicache_ratio",
                                                      "storage_backend_extra_config": "hicache_storage_backend_extra_config"}
    args = SimpleNamespace(hicache_ratio=2.5, hicache_storage_backend_extra_config='{"prefetch_threshold": 8}')
    cache = build_from_arguments(tree, HiRadixCache, args, {"req_to_token_pool": "pool", "page_size": 4})
    assert cache.built == dict(req_to_token_pool="pool", page_size=4, hicache_ratio=2.5,
                               storage_backend_extra_config='{"prefetch_threshold": 8}', enable_metrics=False)


def test_an_argument_nothing_supplies_refuses_the_build_in_one_line(tmp_path):
    package(tmp_path, {"srt/managers/scheduler.py": "", "srt/mem_cache/hiradix_cache.py": ""})

    class NeedsAModel:
        def __init__(self, page_size, model_config):
            pass

    with pytest.raises(LiveBuildError, match=r"^NeedsAModel.__init__ of this tree takes `model_config`, which neither") as err:
        build_from_arguments(locate(str(tmp_path)), NeedsAModel, SimpleNamespace(), {"page_size": 4})
    assert "\n" not in str(err.value)


# --- storage-batch-size on a controller that keeps it per instance ---------------------------------------------

def test_the_storage_batch_size_reaches_a_controller_that_keeps_its_own():
    module = types.ModuleType("cache_controller")

    class HiCacheController:
        def __init__(self) -> None:
            self.storage_batch_size = 128

    module.HiCacheController = HiCacheController
    shims.set_storage_batch_pages(module, 2)
    assert HiCacheController().storage_batch_size == 2
    shims.set_storage_batch_pages(module, 3)  # the wrapper is installed once and reads the current value
    assert HiCacheController().storage_batch_size == 3 and module.STORAGE_BATCH_SIZE == 3
