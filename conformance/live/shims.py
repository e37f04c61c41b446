"""The runtime shims that let SGLang's cache modules run on a CPU-only machine.

Each shim is small, named, applied at run time to the user's imported tree
(nothing is copied from upstream) and listed in SHIMS, which docs/upstream.md's
table mirrors. Every shim replaces something that only exists with CUDA, or
injects what the harness must control (the clock, the batch size); none
changes a decision or a free rule of the code under test.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import sys
import threading
import time
import types
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Shim:
    name: str
    replaces: str
    why: str


SHIMS = (
    Shim("torchvision-stand-in", "the torchvision package (imported unconditionally by sglang.srt.utils.common and by transformers)",
         "torchvision's wheels link against CUDA torch and do not load against a CPU torch; every name in the stand-in raises if called, and the cache never calls one"),
    Shim("unpinned-host-pool", "pin_memory=True of HostKVCache.__init__ and of every host pool with an __init__ of its own (MambaPoolHost; in 0.5.2x the pools of pool_host.mha and pool_host.mamba)",
         "pinned memory needs a CUDA allocator; on CPU a plain tensor is the same memory"),
    Shim("direct-copy", "transfer_kv_direct of memory_pool_host (0.5.2x: of pool_host.mha and pool_host.mamba), an sgl_kernel import skipped without CUDA",
         "the 'direct' IO backend's per-layer copy, written as a plain index copy of the same rows"),
    Shim("page-first-direct-copy", "transfer_kv_per_layer_direct_pf_lf and transfer_kv_all_layer_direct_lf_pf of pool_host.mha and pool_host.mamba (0.5.2x), sgl_kernel imports skipped without CUDA",
         "the 'direct' IO backend's copies between page-first host pages and layer-first device rows, written as plain index copies; 0.5.2x's mamba host pool has no layer-first layout"),
    Shim("injected-clock", "time.monotonic as read by hiradix_cache, hi_mamba_radix_cache, unified_radix_cache, cache_controller and hybrid_cache_controller; time.perf_counter as read by utils.poll_timer (0.5.23's prefetch wait timer; 0.5.22 times the wait from start_time with time.monotonic)",
         "the harness advances time with its own clock (ManualClock) so that timeouts are crossed exactly, never by sleeping"),
    Shim("storage-batch-size", "cache_controller.STORAGE_BATCH_SIZE (128 pages upstream)",
         "the harness's scenarios load 4 pages in batches of 2, so that a gate can hold the second batch"),
    Shim("server-args-without-model", "ServerArgs.__post_init__ (model, hardware and CUDA-graph resolution), and the model-derived mamba_cache_chunk_size (set to the page size); 0.5.2x resolves through its own no-model path (model 'dummy') and needs only the chunk size",
         "it loads the model's config.json from the hub; the caches read only the hicache_* fields, which are set as a user sets them"),
    Shim("prompt-reset", "HiCacheController.reset, which RadixCache.__init__ calls: its joins of the storage threads first put the None "
                         "wake-up in their queues, where the tree's own _stop_storage_threads does so (so its threads take None as a wake-up)",
         "reset joins threads blocked in a 1 s queue poll without waking them: every cache built waits that second out; the wake-up is "
         "the one the release's own stop path sends, and changes no decision"),
    Shim("load-back-threshold", "load_back_threshold of the cache (10 tokens upstream)",
         "the harness loads back partial commits of one page; upstream would skip them as too small to be worth a copy"),
)


# --- torchvision-stand-in ---------------------------------------------------------

class _Unavailable:
    """Any torchvision name: raises when called, yields more of itself on attribute access."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{self._name}: torchvision is not available here (the torchvision-stand-in shim of conformance/live/shims.py)")

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Unavailable(f"{self._name}.{attr}")

    def __mro_entries__(self, bases: tuple) -> tuple:  # `class X(torchvision.Y)` at import time
        return (object,)


class TorchvisionStandIn(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves `torchvision` and every `torchvision.*` module as a stand-in."""

    VERSION = "0.28.0"  # the release paired with torch 2.13; transformers reads it to decide what to import

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname == "torchvision" or fullname.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = types.ModuleType(spec.name)
        module.__path__ = []

        def missing(attr: str, _module: str = spec.name) -> Any:
            if attr.startswith("__"):
                raise AttributeError(attr)
            return _Unavailable(f"{_module}.{attr}")

        module.__getattr__ = missing  # type: ignore[attr-defined]
        if spec.name == "torchvision":
            module.__version__ = self.VERSION  # type: ignore[attr-defined]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def torchvision_loads() -> bool:
    """True when a real torchvision imports here (then no stand-in is installed)."""
    if any(isinstance(f, TorchvisionStandIn) for f in sys.meta_path):
        return False
    if importlib.util.find_spec("torchvision") is None:
        return False
    try:
        importlib.import_module("torchvision")
        return True
    except Exception:  # CUDA-linked wheels fail with RuntimeError or OSError
        for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
            del sys.modules[name]
        return False


def install_torchvision_stand_in() -> bool:
    """Install the stand-in unless a real torchvision loads; True when installed."""
    if torchvision_loads():
        return False
    if not any(isinstance(f, TorchvisionStandIn) for f in sys.meta_path):
        sys.meta_path.insert(0, TorchvisionStandIn())
    return True


# --- unpinned-host-pool --------------------------------------------------------------

def unpin_host_pool(module: types.ModuleType) -> None:
    """Every host pool the module defines or holds with an __init__ of its own (MambaPoolHost's does not call its base's).

    A host pool is a class with HostKVCache among its bases (the fork's
    memory_pool_host defines it; 0.5.2x's pool_host modules import it).
    """
    classes = [c for c in vars(module).values()
               if isinstance(c, type) and any(b.__name__ == "HostKVCache" for b in c.__mro__) and "__init__" in vars(c)]
    for cls in classes:
        _unpin(cls)


def _unpin(cls: type) -> None:
    original = cls.__init__
    if getattr(original, "_conformance_unpinned", False):
        return
    signature = inspect.signature(original)
    if "pin_memory" not in signature.parameters:
        return  # a host pool that takes no such flag needs no shim

    @functools.wraps(original)
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        bound = signature.bind(self, *args, **kwargs)
        bound.arguments["pin_memory"] = False
        original(*bound.args, **bound.kwargs)

    init._conformance_unpinned = True  # type: ignore[attr-defined]
    cls.__init__ = init


# --- direct-copy ------------------------------------------------------------------------

CopyObserver = Callable[[list, list, Any, Any], Callable[[], None]]


class DirectCopy:
    """transfer_kv_direct as a plain index copy; observers may gate and record each call."""

    def __init__(self) -> None:
        self.observers: list[CopyObserver] = []
        self._lock = threading.Lock()

    def __call__(self, src_layers: list, dst_layers: list, src_indices: Any, dst_indices: Any, page_size: int = 1) -> None:
        with self._lock:
            observers = list(self.observers)
        finish = [observer(src_layers, dst_layers, src_indices, dst_indices) for observer in observers]
        for src, dst in zip(src_layers, dst_layers):
            dst[dst_indices] = src[src_indices]
        for done in finish:
            done()

    def add(self, observer: CopyObserver) -> None:
        with self._lock:
            self.observers.append(observer)

    def remove(self, observer: CopyObserver) -> None:
        with self._lock:
            if observer in self.observers:
                self.observers.remove(observer)


def install_direct_copy(module: types.ModuleType, copy: DirectCopy) -> DirectCopy:
    """The module's transfer_kv_direct becomes `copy` (one DirectCopy may serve several modules)."""
    existing = getattr(module, "transfer_kv_direct", None)
    if isinstance(existing, DirectCopy):
        return existing
    module.transfer_kv_direct = copy
    return copy


# --- page-first-direct-copy ------------------------------------------------------------

def _rows_of_pages(host: Any, page_size: int) -> Any:
    """A page-first host buffer [pages, layers, page_size, ...] as [pages, layers, page_size, row bytes]."""
    return host.view(host.shape[0], host.shape[1], page_size, -1)


def per_layer_direct_pf_lf(src_ptrs: list, dst_ptrs: list, src_indices: Any, dst_indices: Any, layer_id: int, page_size: int) -> None:
    """Host (page-first) -> device (layer-first), one layer: device row d gets host slot s of that layer."""
    src, dst = src_indices.long(), dst_indices.long()
    for host, device in zip(src_ptrs, dst_ptrs):
        device.view(device.shape[0], -1)[dst] = _rows_of_pages(host, page_size)[src // page_size, layer_id, src % page_size]


def all_layer_direct_lf_pf(src_ptrs: list, dst_ptrs: list, src_indices: Any, dst_indices: Any, page_size: int) -> None:
    """Device (layer-first, every layer) -> host (page-first): src_ptrs holds each host buffer's layers in turn (k layers, then v)."""
    src, dst = src_indices.long(), dst_indices.long()
    per_buffer = len(src_ptrs) // len(dst_ptrs)
    for index, host in enumerate(dst_ptrs):
        pages = _rows_of_pages(host, page_size)
        for layer, device in enumerate(src_ptrs[index * per_buffer : (index + 1) * per_buffer]):
            pages[dst // page_size, layer, dst % page_size] = device.reshape(device.shape[0], -1)[src]


def install_page_first_direct_copy(module: types.ModuleType) -> None:
    module.transfer_kv_per_layer_direct_pf_lf = per_layer_direct_pf_lf
    module.transfer_kv_all_layer_direct_lf_pf = all_layer_direct_lf_pf


# --- injected-clock ---------------------------------------------------------------------

class InjectedTime:
    """Stands in for the `time` module inside upstream modules: monotonic() reads the current harness clock."""

    def __init__(self) -> None:
        self.clock: Any = None

    def monotonic(self) -> float:
        clock = self.clock
        return clock.now() if clock is not None else time.monotonic()

    def __getattr__(self, name: str) -> Any:  # perf_counter, sleep, time, ...: the real ones
        return getattr(time, name)


class InjectedPerfTime:
    """Stands in for `time` where perf_counter() times a wait (a timer, not a measurement): it reads the harness clock too."""

    def __init__(self, injected: InjectedTime) -> None:
        self._injected = injected

    def perf_counter(self) -> float:
        return self._injected.monotonic()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._injected, name)


def inject_clock(modules: list[types.ModuleType], injected: InjectedTime, *, perf_counter_modules: list[types.ModuleType] = ()) -> None:
    for module in modules:
        if getattr(module, "time", None) is time:
            module.time = injected
    for module in perf_counter_modules:
        if getattr(module, "time", None) is time:
            module.time = InjectedPerfTime(injected)


# --- storage-batch-size ------------------------------------------------------------------

def set_storage_batch_pages(cache_controller: types.ModuleType, pages: int) -> None:
    cache_controller.STORAGE_BATCH_SIZE = pages


# --- prompt-reset -----------------------------------------------------------------------

WAKE_QUEUES = ("prefetch_queue", "backup_queue")


def install_prompt_reset(cache_controller: types.ModuleType) -> bool:
    """Wrap HiCacheController.reset to wake its storage threads first; only where the class's own stop path wakes them with None."""
    cls = getattr(cache_controller, "HiCacheController", None)
    if cls is None or getattr(cls.reset, "_conformance_prompt", False):
        return False
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return False
    if not all(f"self.{name}.put_nowait(None)" in source for name in WAKE_QUEUES):
        return False  # its threads are not known to take None as a wake-up
    original = cls.reset

    @functools.wraps(original)
    def reset(self: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(self, "enable_storage", False):
            self.storage_stop_event.set()  # what reset sets first, before the wake-up is taken
            for name in WAKE_QUEUES:
                queue = getattr(self, name, None)
                if queue is not None:
                    queue.put_nowait(None)
        return original(self, *args, **kwargs)

    reset._conformance_prompt = True  # type: ignore[attr-defined]
    cls.reset = reset
    return True


# --- server-args-without-model -------------------------------------------------------------

def server_args_without_model(server_args_cls: type, **values: Any) -> Any:
    """A ServerArgs with every field at its declared default except `values`, __post_init__ not run."""
    import dataclasses

    args = server_args_cls.__new__(server_args_cls)
    for f in dataclasses.fields(server_args_cls):
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = None
        object.__setattr__(args, f.name, default)
    unknown = sorted(set(values) - {f.name for f in dataclasses.fields(server_args_cls)})
    if unknown:
        raise AttributeError(f"ServerArgs of this tree has no field(s) {unknown}")
    for name, value in values.items():
        object.__setattr__(args, name, value)
    return args
