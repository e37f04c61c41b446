"""The runtime shims that let SGLang's cache modules run on a CPU-only machine.

Each shim is small, named, applied at run time to the user's imported tree
(nothing is copied from upstream) and listed in SHIMS, which docs/upstream.md's
table mirrors. Every shim replaces something that only exists with CUDA, or
injects what the harness must control (the clock, the batch size); none
changes a decision or a free rule of the code under test.
"""

from __future__ import annotations

import ast
import functools
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import re
import sys
import threading
import time
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from conformance.errors import ConformanceError, ConformanceFailure


@dataclass(frozen=True)
class Shim:
    name: str
    replaces: str
    why: str


SHIMS = (
    Shim("torchvision-stand-in", "the torchvision package (imported unconditionally by sglang.srt.utils.common and by transformers)",
         "torchvision's wheels link against CUDA torch and do not load against a CPU torch; every name in the stand-in raises if called, and the cache never calls one"),
    Shim("sgl-kernel-stand-in", "the sgl_kernel package, where a tree imports it unconditionally (host pools before 2026: `from sgl_kernel.kvcacheio import ...`)",
         "SGLang's CUDA kernels have no CPU wheel; every name raises if called; the direct IO backend's copies are the direct-copy shim's, "
         "and a layout whose direct copies would still call a stand-in is refused with the line that calls it"),
    Shim("cpu-streams", "torch.cuda.Stream, Event, stream, current_stream, set_stream and synchronize as read by a controller that makes "
                        "its own CUDA streams (before 2025-11; later trees read torch.get_device_module(), torch.cpu on CPU)",
         "a CPU build of torch cannot create a CUDA stream; torch.cpu's streams and events are what newer trees get on CPU, where work "
         "is done when issued"),
    Shim("unpinned-host-pool", "pin_memory=True of HostKVCache.__init__ and of every host pool with an __init__ of its own (MambaPoolHost; in 0.5.2x the pools of pool_host.mha and pool_host.mamba)",
         "pinned memory needs a CUDA allocator; on CPU a plain tensor is the same memory"),
    Shim("direct-copy", "transfer_kv_direct of memory_pool_host (0.5.2x: of pool_host.mha and pool_host.mamba), an sgl_kernel import skipped without CUDA",
         "the 'direct' IO backend's per-layer copy, written as a plain index copy of the same rows"),
    Shim("page-first-direct-copy", "transfer_kv_per_layer_direct_pf_lf and transfer_kv_all_layer_direct_lf_pf of pool_host.mha and pool_host.mamba (0.5.2x), sgl_kernel imports skipped without CUDA",
         "the 'direct' IO backend's copies between page-first host pages and layer-first device rows, written as plain index copies; 0.5.2x's mamba host pool has no layer-first layout"),
    Shim("injected-clock", "time.monotonic as read by hiradix_cache, hi_mamba_radix_cache, unified_radix_cache, cache_controller and hybrid_cache_controller; time.perf_counter as read by utils.poll_timer (0.5.23's prefetch wait timer; 0.5.22 times the wait from start_time with time.monotonic)",
         "the harness advances time with its own clock (ManualClock) so that timeouts are crossed exactly, never by sleeping"),
    Shim("storage-batch-size", "cache_controller.STORAGE_BATCH_SIZE (128 pages upstream); before 2026-06, the controller's storage_batch_size; "
                               "before 2025-09-02, the batch _page_transfer fixes (8 pages), by splitting each call of its get function",
         "the harness's scenarios load 4 pages in batches of 2, so that a gate can hold the second batch"),
    Shim("prefetch-threshold", "the prefetch threshold a cache's __init__ fixes (256 tokens in 2025), on the cache and its controller, "
                               "only where the tree's code sets it to a number (the header prints that line)",
         "no setting of a user's reaches it, and at the suite's 4-token pages it revokes every prefetch; the test's threshold "
         "(threshold_pages x page size) is what a later tree's extra config sets, and the protocol is judged on, not the number"),
    Shim("server-args-without-model", "ServerArgs.__post_init__ (model, hardware and CUDA-graph resolution), and the model-derived mamba_cache_chunk_size (set to the page size); 0.5.2x resolves through its own no-model path (model 'dummy') and needs only the chunk size",
         "it loads the model's config.json from the hub; the caches read only the hicache_* fields, which are set as a user sets them"),
    Shim("prompt-reset", "HiCacheController.reset, which RadixCache.__init__ calls: its joins of the storage threads first put the None "
                         "wake-up in their queues, where the tree's own _stop_storage_threads does so (so its threads take None as a wake-up)",
         "reset joins threads blocked in a 1 s queue poll without waking them: every cache built waits that second out; the wake-up is "
         "the one the release's own stop path sends, and changes no decision"),
    Shim("load-back-threshold", "load_back_threshold of the cache (10 tokens upstream)",
         "the harness loads back partial commits of one page; upstream would skip them as too small to be worth a copy"),
)


# --- torchvision-stand-in, sgl-kernel-stand-in ------------------------------------------

class StandInCalled(ConformanceError, RuntimeError):
    """A name of a stand-in package was called: the path that called it needs the real package."""


class _Unavailable:
    """Any name of a stand-in package: raises when called, yields more of itself on attribute access."""

    def __init__(self, name: str, why: str) -> None:
        self._name = name
        self._why = why

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise StandInCalled(f"{self._name}: {self._why}")

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Unavailable(f"{self._name}.{attr}", self._why)

    def __mro_entries__(self, bases: tuple) -> tuple:  # `class X(package.Y)` at import time
        return (object,)


def is_stand_in(value: Any) -> bool:
    return isinstance(value, _Unavailable)


class PackageStandIn(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves a package and every module under it as a stand-in whose names raise when called."""

    PACKAGE = ""
    SHIM = ""
    VERSION: str | None = None

    def why(self) -> str:
        return f"{self.PACKAGE} is not available here (the {self.SHIM} shim of conformance/live/shims.py)"

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname == self.PACKAGE or fullname.startswith(self.PACKAGE + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = types.ModuleType(spec.name)
        module.__path__ = []
        why = self.why()

        def missing(attr: str, _module: str = spec.name) -> Any:
            if attr.startswith("__"):
                raise AttributeError(attr)
            return _Unavailable(f"{_module}.{attr}", why)

        module.__getattr__ = missing  # type: ignore[attr-defined]
        if spec.name == self.PACKAGE and self.VERSION is not None:
            module.__version__ = self.VERSION  # type: ignore[attr-defined]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None

    @classmethod
    def real_package_loads(cls) -> bool:
        """True when the real package imports here (then no stand-in is installed)."""
        if any(isinstance(f, cls) for f in sys.meta_path):
            return False
        if importlib.util.find_spec(cls.PACKAGE) is None:
            return False
        try:
            importlib.import_module(cls.PACKAGE)
            return True
        except Exception:  # CUDA-linked wheels fail with RuntimeError or OSError
            for name in [n for n in sys.modules if n == cls.PACKAGE or n.startswith(cls.PACKAGE + ".")]:
                del sys.modules[name]
            return False

    @classmethod
    def install(cls) -> bool:
        """Install the stand-in unless the real package loads; True when installed."""
        if cls.real_package_loads():
            return False
        if not any(isinstance(f, cls) for f in sys.meta_path):
            sys.meta_path.insert(0, cls())
        return True


class TorchvisionStandIn(PackageStandIn):
    """`torchvision` and every `torchvision.*` module."""

    PACKAGE = "torchvision"
    SHIM = "torchvision-stand-in"
    VERSION = "0.28.0"  # the release paired with torch 2.13; transformers reads it to decide what to import


class SglKernelStandIn(PackageStandIn):
    """`sgl_kernel` (SGLang's CUDA kernels, no CPU wheel): imported unconditionally by older trees' host pools."""

    PACKAGE = "sgl_kernel"
    SHIM = "sgl-kernel-stand-in"

    def why(self) -> str:
        return f"a GPU-only kernel of {self.PACKAGE}, which does not install without CUDA (the {self.SHIM} shim of conformance/live/shims.py)"


def install_torchvision_stand_in() -> bool:
    return TorchvisionStandIn.install()


def install_sgl_kernel_stand_in() -> bool:
    return SglKernelStandIn.install()


# --- cpu-streams ----------------------------------------------------------------------------

CUDA_STREAM_CALLS = re.compile(r"\btorch\.cuda\.(Stream|Event|current_stream|stream|set_stream|synchronize)\(")


class _CpuStream(torch.cpu.Stream):
    """torch.cpu's stream, with the CUDA stream methods older trees call on it (work on CPU is done when issued)."""

    def synchronize(self) -> None:
        return None

    def query(self) -> bool:
        return True


class _CpuAsCuda:
    """Stands in for `torch.cuda` inside one upstream module: streams and events as torch.cpu's (what
    torch.get_device_module() gives newer trees on CPU); every other name is torch.cuda's own."""

    Stream = _CpuStream
    Event = torch.cpu.Event

    @staticmethod
    def current_stream(device: Any = None) -> _CpuStream:
        return _CpuStream()

    @staticmethod
    def stream(stream: Any) -> Any:
        return torch.cpu.stream(stream)

    @staticmethod
    def set_stream(stream: Any) -> None:
        return None

    @staticmethod
    def synchronize(device: Any = None) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cuda, name)


class _TorchWithCpuStreams:
    """Stands in for `torch` inside one upstream module: torch itself, but for `torch.cuda`."""

    cuda = _CpuAsCuda()

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)


def install_cpu_streams(module: types.ModuleType) -> str | None:
    """Where the module's own code creates or enters CUDA streams and events (older trees' controllers), its `torch` reads
    them from torch.cpu; returns the first such line as evidence (None: the module needs no shim)."""
    if getattr(module, "torch", None) is not torch:
        return None
    try:
        source = inspect.getsource(module)
    except (OSError, TypeError):
        return None
    found = CUDA_STREAM_CALLS.search(source)
    if found is None:
        return None
    module.torch = _TorchWithCpuStreams()
    line = source.count("\n", 0, found.start()) + 1
    return f"{Path(module.__file__).name}:{line}: `{source.splitlines()[line - 1].strip()}`"


# --- sgl-kernel-stand-in: copies on the driven path ---------------------------------------------

def _is_direct_branch(test: ast.expr) -> bool:
    """`io_backend == "direct"` (or self.io_backend): the branch the harness's direct IO backend takes."""
    return (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)
            and ((isinstance(test.left, ast.Name) and test.left.id == "io_backend")
                 or (isinstance(test.left, ast.Attribute) and test.left.attr == "io_backend"))
            and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value == "direct")


def stand_ins_on_direct_path(module: types.ModuleType) -> list[str]:
    """Each call in the module's direct-IO-backend branches to a name still bound to a stand-in: 'file:line: name'."""
    try:
        source = inspect.getsource(module)
    except (OSError, TypeError):
        return []
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.If) and _is_direct_branch(node.test):
            for inner in (n for statement in node.body for n in ast.walk(statement)):
                if isinstance(inner, ast.Call) and isinstance(inner.func, ast.Name) and is_stand_in(getattr(module, inner.func.id, None)):
                    out.append(f"{Path(module.__file__).name}:{inner.lineno}: {inner.func.id}")
    return list(dict.fromkeys(out))


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


class RowWidthMismatch(ConformanceFailure):
    """A copy between tiers whose rows hold different numbers of bytes (a host pool sized from other dimensions)."""


def row_bytes(layer: torch.Tensor) -> int:
    """Bytes of one row (slot) of a layer's buffer."""
    return int(torch.Size(layer.shape[1:]).numel()) * layer.element_size()


class DirectCopy:
    """transfer_kv_direct as a plain index copy; observers may gate and record each call."""

    def __init__(self) -> None:
        self.observers: list[CopyObserver] = []
        self._lock = threading.Lock()

    def __call__(self, src_layers: list, dst_layers: list, src_indices: Any, dst_indices: Any, page_size: int = 1) -> None:
        for src, dst in zip(src_layers, dst_layers):
            if row_bytes(src) != row_bytes(dst):
                raise RowWidthMismatch(f"S5: a copy from rows of {row_bytes(src)} bytes into rows of {row_bytes(dst)}: the two tiers disagree on "
                                       f"a slot's width, so no page comes back as it was stored")
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
    """The module's STORAGE_BATCH_SIZE (2026-06 on); before it, each controller's storage_batch_size, set as it is built
    and again as a storage backend is attached (which set it to 128: a DSA build attaches its backend after the build)."""
    cache_controller.STORAGE_BATCH_SIZE = pages
    cls = getattr(cache_controller, "HiCacheController", None)
    if cls is None:
        return
    for name in ("__init__", "attach_storage_backend"):
        original = getattr(cls, name, None)
        if original is None or getattr(original, "_conformance_batch", False):
            continue
        setattr(cls, name, _then_set_batch(original, cache_controller))


def _then_set_batch(original: Callable, cache_controller: types.ModuleType) -> Callable:
    @functools.wraps(original)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        if hasattr(self, "storage_batch_size"):
            self.storage_batch_size = cache_controller.STORAGE_BATCH_SIZE
        return result

    wrapper._conformance_batch = True  # type: ignore[attr-defined]
    return wrapper


def split_fixed_batch(cc: Any, get_func: str, pages: int) -> None:
    """A controller whose _page_transfer fixes its batch: each call of its get function (operation, hashes, host slots) runs
    as calls of `pages` pages, each a storage call of its own, stopping at the first that lands short (terminated or
    failed), as _page_transfer's own loop stops; _page_transfer then sees the batch short and stops too."""
    original = getattr(cc, get_func)
    page_size = cc.page_size

    def split(operation: Any, hash_values: Any, host_indices: Any, *args: Any) -> Any:
        result = None
        for first in range(0, len(hash_values), pages):
            hashes = hash_values[first : first + pages]
            before = operation.completed_tokens
            result = original(operation, hashes, host_indices[first * page_size : (first + len(hashes)) * page_size], *args)
            if operation.completed_tokens != before + len(hashes) * page_size:
                break
        return result

    setattr(cc, get_func, functools.wraps(original)(split))


# --- prefetch-threshold --------------------------------------------------------------------

def set_prefetch_threshold(cache: Any, tokens: int) -> None:
    """The cache's prefetch threshold, and its controller's as the controller derives it from the one it is given
    (at least one page: `max(prefetch_threshold, self.page_size)`)."""
    cache.prefetch_threshold = tokens
    cc = getattr(cache, "cache_controller", None)
    if cc is not None and hasattr(cc, "prefetch_threshold"):
        cc.prefetch_threshold = max(tokens, cc.page_size)


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
