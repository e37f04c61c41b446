"""The runtime shims of conformance/live/shims.py, on hand-written upstream-shaped objects."""

from __future__ import annotations

import threading
import dataclasses
import time
import types
from pathlib import Path

import pytest
import torch

from conformance.live import shims
from spec.clock import ManualClock


def stand_in_module(name: str) -> types.ModuleType:
    finder = shims.TorchvisionStandIn()  # not installed: the test process keeps its own import system
    spec = finder.find_spec(name, None)
    assert spec is not None
    return finder.create_module(spec)


def test_torchvision_stand_in_names_import_and_raise_when_called():
    io = stand_in_module("torchvision.io")
    decode_jpeg = io.decode_jpeg  # what `from torchvision.io import decode_jpeg` binds
    with pytest.raises(RuntimeError, match="torchvision.io.decode_jpeg: torchvision is not available here"):
        decode_jpeg(b"")
    assert stand_in_module("torchvision").__version__ == shims.TorchvisionStandIn.VERSION


def test_torchvision_stand_in_serves_only_torchvision():
    finder = shims.TorchvisionStandIn()
    assert finder.find_spec("torchvisionx", None) is None
    assert finder.find_spec("torch", None) is None


def test_torchvision_stand_in_can_be_subclassed_and_read_as_constants():
    transforms = stand_in_module("torchvision.transforms")
    bilinear = transforms.InterpolationMode.BILINEAR  # read at import time by transformers

    class Resize(transforms.Resize):  # subclassed at import time by some model code
        pass

    assert isinstance(Resize(), object)
    with pytest.raises(RuntimeError, match="InterpolationMode.BILINEAR"):
        bilinear()


def upstream_shaped_host_pool_module() -> types.ModuleType:
    """HostKVCache and a subclass passing pin_memory positionally, as upstream's pools do."""
    module = types.ModuleType("memory_pool_host")

    class HostKVCache:
        def __init__(self, device_pool, ratio, size, page_size, layout, pin_memory, device, allocator_type="default"):
            self.pin_memory = pin_memory
            self.device = device

    class MHATokenToKVPoolHost(HostKVCache):
        def __init__(self, device_pool, ratio, size, page_size, layout, pin_memory=True, device="cpu"):
            super().__init__(device_pool, ratio, size, page_size, layout, pin_memory, device)

    module.HostKVCache = HostKVCache
    module.MHATokenToKVPoolHost = MHATokenToKVPoolHost
    return module


def test_unpinned_host_pool_forces_pin_memory_off_once():
    module = upstream_shaped_host_pool_module()
    assert module.MHATokenToKVPoolHost(None, 2.0, 0, 4, "layer_first").pin_memory is True
    shims.unpin_host_pool(module)
    shims.unpin_host_pool(module)  # idempotent: a second cache in the same process
    pool = module.MHATokenToKVPoolHost(None, 2.0, 0, 4, "layer_first")
    assert pool.pin_memory is False and pool.device == "cpu"


def test_direct_copy_copies_rows_and_brackets_observers():
    src = [torch.arange(12.0).reshape(6, 2), torch.arange(12.0, 24.0).reshape(6, 2)]
    dst = [torch.zeros(6, 2), torch.zeros(6, 2)]
    seen = []

    def observer(src_layers, dst_layers, src_indices, dst_indices):
        seen.append(("start", dst_layers[0][dst_indices].sum().item()))
        return lambda: seen.append(("end", dst_layers[0][dst_indices].sum().item()))

    copy = shims.DirectCopy()
    copy.add(observer)
    copy(src, dst, torch.tensor([0, 5]), torch.tensor([2, 3]))
    assert torch.equal(dst[0][2], src[0][0]) and torch.equal(dst[1][3], src[1][5])
    assert dst[0][0].sum() == 0, "rows outside dst_indices must stay untouched"
    assert seen == [("start", 0.0), ("end", src[0][0].sum().item() + src[0][5].sum().item())]
    copy.remove(observer)
    copy(src, dst, torch.tensor([1]), torch.tensor([1]))
    assert len(seen) == 2



def test_direct_copy_between_rows_of_different_widths_names_s5_before_it_touches_anything():
    seen = []
    copy = shims.DirectCopy()
    copy.add(lambda *args: seen.append("start") or (lambda: None))
    device, host = [torch.ones(4, 1, 148, dtype=torch.uint8)], [torch.zeros(4, 1, 136, dtype=torch.uint8)]
    with pytest.raises(shims.RowWidthMismatch, match=r"^S5: a copy from rows of 148 bytes into rows of 136: "):
        copy(device, host, torch.tensor([0]), torch.tensor([1]))
    assert not host[0].any() and seen == [], "nothing copied, no IO recorded"


def test_injected_time_reads_the_harness_clock_and_passes_the_rest():
    clock = ManualClock(1000.0)
    injected = shims.InjectedTime()
    assert abs(injected.monotonic() - time.monotonic()) < 5.0, "without a clock it is the real monotonic clock"
    injected.clock = clock
    clock.advance(2.5)
    assert injected.monotonic() == 1002.5
    assert injected.perf_counter is time.perf_counter
    upstream = types.ModuleType("hiradix_cache")
    upstream.time = time
    aliased = types.ModuleType("other")
    aliased.time = object()  # a module whose `time` is not the time module is left alone
    shims.inject_clock([upstream, aliased], injected)
    assert upstream.time is injected and aliased.time is not injected


@dataclasses.dataclass
class UpstreamShapedServerArgs:
    model_path: str
    page_size: int = 1
    hicache_ratio: float = 2.0
    extra_metric_labels: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        raise AssertionError("would load the model's config from the hub")


def test_server_args_without_model_skips_post_init():
    args = shims.server_args_without_model(UpstreamShapedServerArgs, model_path="m", page_size=4)
    assert (args.model_path, args.page_size, args.hicache_ratio, args.extra_metric_labels) == ("m", 4, 2.0, {})
    with pytest.raises(AttributeError, match="hicache_bogus"):
        shims.server_args_without_model(UpstreamShapedServerArgs, model_path="m", hicache_bogus=1)


def test_every_shim_is_documented_in_the_upstream_docs_table():
    names = [s.name for s in shims.SHIMS]
    assert len(names) == len(set(names))
    readme = (Path(__file__).resolve().parents[2] / "docs" / "upstream.md").read_text(encoding="utf-8")
    rows = {line.split("|")[1].strip(" `") for line in readme.splitlines() if line.startswith("| `")}
    missing = [name for name in names if name not in rows]
    assert not missing, f"docs/upstream.md's shim table lacks {missing}"


def test_a_thread_ended_by_the_harness_own_hold_running_out_is_no_upstream_death():
    from types import SimpleNamespace

    from conformance.gates import GateTimeout
    from conformance.live.threads import StorageThreads

    def dies(error: Exception) -> threading.Thread:
        def run():
            try:
                raise error
            except Exception as exc:
                taps.thread_errors.append((threading.get_ident(), f"{type(exc).__name__}: {exc} in _page_transfer"))
        thread = threading.Thread(target=run)
        thread.start()
        thread.join()
        return thread

    taps = SimpleNamespace(thread_errors=[], io_thread=None)
    held = SimpleNamespace(prefetch_io_aux_thread=dies(GateTimeout("hold 'indexer get' was never released within 20.0s")))
    assert StorageThreads(held, ["prefetch_io_aux_thread"], taps, 1.0).deaths() == []
    taps.thread_errors.clear()
    broken = SimpleNamespace(prefetch_io_aux_thread=dies(IndexError("index 64 is out of bounds")))
    assert StorageThreads(broken, ["prefetch_io_aux_thread"], taps, 1.0).deaths() == [
        "L5: upstream's prefetch_io_aux_thread ended on IndexError: index 64 is out of bounds in _page_transfer; its loop catches only "
        "queue.Empty, so no later transfer of this cache runs"]


def test_a_page_write_is_the_pool_its_key_suffix_names_in_either_of_upstreams_spellings():
    from conformance.live.taps.state import Taps
    from spec.config import Policy, TerminationConfig
    from spec.trace import TraceRecorder

    taps = Taps(TraceRecorder(ManualClock(0.0)), TerminationConfig(policy=Policy.WAIT_COMPLETE, page_size=4), 4)
    taps.pools = {"kv", "indexer"}
    assert [taps.page_pool(k) for k in ("5e15e6", "5e15e6.indexer", "5e15e6.PoolName.INDEXER", "5e15e6.mamba")] == [
        "kv", "indexer", "indexer", "kv"]


def controller_module() -> types.ModuleType:
    """A cache_controller of 2026-04: the batch set to 128 pages when a backend is attached, which a DSA build's
    HybridCacheController does after its build, through super()."""
    module = types.ModuleType("cache_controller")

    class HiCacheController:
        def __init__(self, storage_backend=None):
            if storage_backend is not None:
                self.attach_storage_backend(storage_backend)

        def attach_storage_backend(self, storage_backend):
            self.storage_backend = storage_backend
            self.storage_batch_size = 128

    class HybridCacheController(HiCacheController):
        def attach_storage_backend(self, storage_backend, host_pools=()):
            super().attach_storage_backend(storage_backend)
            self.host_pools = list(host_pools)

    module.HiCacheController, module.HybridCacheController = HiCacheController, HybridCacheController
    return module


def test_the_storage_batch_holds_through_a_backend_attached_after_the_build():
    module = controller_module()
    shims.set_storage_batch_pages(module, 2)
    shims.set_storage_batch_pages(module, 2)  # a second session in the same process: wrapped once
    built_with = module.HiCacheController("file")
    attached_later = module.HybridCacheController()
    attached_later.attach_storage_backend("file", host_pools=["indexer"])
    assert (built_with.storage_batch_size, attached_later.storage_batch_size) == (2, 2)
    assert attached_later.host_pools == ["indexer"]
