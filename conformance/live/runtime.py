"""Import an SGLang tree into this process, apply the shims, start upstream's process group.

One tree per process: Python caches modules by name, so a second tree cannot
be imported beside the first (each --sglang-live run names one tree).
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os
import socket
import sys
import traceback
import types
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from conformance.bounds import STARTUP_S
from conformance.live import evidence, extensions, shims
from conformance.live.layout import Layout, Module
from conformance.live.layouts import BY_KEY
from conformance.live.modules import locate_module
from conformance.live.tree import OPTION, SglangTree
from spec.errors import ConfigError


@dataclass
class Runtime:
    tree: SglangTree
    modules: dict[str, types.ModuleType]
    direct_copy: shims.DirectCopy
    clock: shims.InjectedTime
    torchvision_stand_in: bool
    server_args_cls: type
    distributed: dict = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)  # layout key -> the one line that refuses it in this tree
    notes: list[str] = field(default_factory=list)  # what the run stands in or finds elsewhere, each with its evidence
    host_pool_adds_a_page: bool = True  # HostKVCache sizes itself int(device * ratio) // page + 1 pages (older trees: no + 1)
    fixed_thresholds: frozenset[str] = frozenset()  # classes whose __init__ hard-codes the prefetch threshold (the prefetch-threshold shim)

    def module(self, name: str) -> types.ModuleType:
        return self.modules[name]


_RUNTIME: Runtime | None = None

# Set by load(): multi-rank launches fork their ranks from a server that imports
# the adapter's module; that import loads the same tree (adapter.py), so a rank
# does not spend its hang budget importing SGLang.
PRELOAD_ENV = "CONFORMANCE_SGLANG_LIVE_TREE"

# Upstream modules every live session uses, by short name (a Module where upstream has moved it: found by what it defines).
MODULES = {
    "cache_controller": Module("sglang.srt.managers.cache_controller", "HiCacheController"),
    "memory_pool_host": Module("sglang.srt.mem_cache.memory_pool_host", "HostKVCache"),
    "memory_pool": Module("sglang.srt.mem_cache.memory_pool", "MHATokenToKVPool"),
    "allocator": Module("sglang.srt.mem_cache.allocator", "PagedTokenToKVPoolAllocator"),
    "base_prefix_cache": Module("sglang.srt.mem_cache.base_prefix_cache", "BasePrefixCache"),
    "radix_cache": Module("sglang.srt.mem_cache.radix_cache", "RadixCache"),
    "hicache_storage": Module("sglang.srt.mem_cache.hicache_storage", "HiCacheStorage"),
    "server_args": Module("sglang.srt.server_args", "ServerArgs"),
    "parallel_state": Module("sglang.srt.distributed.parallel_state", "GroupCoordinator"),
}
OPTIONAL_MODULES = {
    "hybrid_cache_controller": "sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller",
    "poll_timer": "sglang.srt.utils.poll_timer",  # 0.5.23's prefetch wait timer; 0.5.22 reads time.monotonic instead
    "cache_init_params": "sglang.srt.mem_cache.cache_init_params",  # older trees take the cache's parts as arguments
}
# Packages the CPU environment cannot install, each served by a stand-in where a tree imports it unconditionally.
STAND_INS = {stand_in.PACKAGE: stand_in for stand_in in (shims.SglKernelStandIn,)}
# Modules whose `time.monotonic` is the harness's clock (the injected-clock shim).
CLOCKED = ("hiradix_cache", "cache_controller", "hybrid_cache_controller", "hi_mamba_radix_cache", "unified_radix_cache")
# Modules whose own code may create CUDA streams and events (older trees' controllers): the cpu-streams shim.
STREAM_MODULES = ("cache_controller", "hybrid_cache_controller", "hiradix_cache", "memory_pool_host")
# Modules whose `time.perf_counter` is the harness's clock: the 0.5.2x prefetch wait timer.
PERF_CLOCKED = ("poll_timer",)
# Host-pool modules whose page-first copies are plain index copies too (the page-first-direct-copy shim): 0.5.2x's, and
# the fork line's, where a build that demands page_first_direct (0.5.14's MambaPoolHost) holds k and v as
# [pages, layers, page size, ...] alike.
PAGE_FIRST_COPY_MODULES = ("pool_host_mha", "pool_host_mamba", "memory_pool_host")


class LiveImportError(ConfigError):
    """The tree could not be imported: one line naming the module, the tree and the cause."""

    def __init__(self, module: str, tree: SglangTree, exc: BaseException) -> None:
        cause = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        super().__init__(OPTION, tree.given, "")
        self.args = (f"{OPTION}: importing {module} from {tree.import_root} failed: {cause} "
                     f"(build the environment with: bash .ci/sglang-live-env VENV)",)

    def __str__(self) -> str:
        return self.args[0]


def load(tree: SglangTree) -> Runtime:
    """Import `tree` (once per process) with the shims applied; a layout whose own modules do not import is refused."""
    global _RUNTIME
    if _RUNTIME is not None:
        if _RUNTIME.tree.import_root != tree.import_root:
            raise ConfigError(OPTION, tree.given, f"the tree already imported in this process ({_RUNTIME.tree.given}): one SGLang tree per run")
        return _RUNTIME
    already = sys.modules.get("sglang")
    if already is not None and Path(getattr(already, "__file__", "") or "").resolve().parent != tree.package.resolve():
        raise ConfigError(OPTION, tree.given, f"a tree not shadowed by the sglang already imported from {already.__file__}")
    stand_in = shims.install_torchvision_stand_in()
    sys.path.insert(0, str(tree.import_root))
    os.environ.setdefault("SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR", "")  # each cache names its own directory
    extensions.own_build_folder()
    layouts = [BY_KEY[key] for key in tree.layouts]
    notes: list[str] = []
    while True:
        try:
            modules, refused = _import_all(tree, layouts, notes)
            break
        except ModuleNotFoundError as exc:  # a package only a stand-in can serve: install it, import the tree afresh
            notes.append(_stand_in_for(exc, tree))
            _forget_tree_modules()
    running = [layout for layout in layouts if layout.key not in refused]
    if running:
        imported_from = Path(modules[next(iter(running[0].modules))].__file__).resolve()
        if tree.package.resolve() not in imported_from.parents:
            raise ConfigError(OPTION, tree.given, f"a tree that is not shadowed (sglang was imported from {imported_from})")
    logging.getLogger("sglang").setLevel(logging.ERROR)
    direct_copy = apply_shims(modules, running, refused, notes)
    shims.install_prompt_reset(modules["cache_controller"])
    clock = shims.InjectedTime()
    shims.inject_clock([m for k, m in modules.items() if k in CLOCKED], clock,
                       perf_counter_modules=[m for k, m in modules.items() if k in PERF_CLOCKED])
    page_hash = extensions.tree_page_hash()
    if page_hash is not None:
        failure = extensions.build_ahead(page_hash, STARTUP_S)
        if failure:
            notes.append(failure)
    _RUNTIME = Runtime(tree, modules, direct_copy, clock, stand_in, modules["server_args"].ServerArgs, refused=refused, notes=notes,
                       host_pool_adds_a_page=_adds_a_page(modules["memory_pool_host"]),
                       fixed_thresholds=_fixed_settings(tree, running, notes))
    os.environ[PRELOAD_ENV] = tree.given
    return _RUNTIME


def _fixed_settings(tree: SglangTree, layouts: list[Layout], notes: list[str]) -> frozenset[str]:
    """The classes whose own code fixes the prefetch threshold (the prefetch-threshold shim), and a fixed storage batch
    (the storage-batch-size shim's split), each noted with its line."""
    fixed = {}
    for layout in layouts:
        hit = evidence.fixed_threshold_of(tree, layout.class_name)
        if hit is not None and layout.class_name not in fixed:
            fixed[layout.class_name] = hit
            notes.append("prefetch-threshold: " + hit.cite(tree, f"{layout.class_name}.__init__ fixes its prefetch threshold (tokens); "
                                                                 "no setting reaches it") +
                         "; each test's threshold (its threshold_pages x page size) is set on the cache and its controller instead")
    batch = evidence.fixed_batch_of(tree)
    if batch is not None:
        notes.append("storage-batch-size: " + batch.cite(tree, "_page_transfer fixes the file backend's batch") +
                     "; each call of its get function is split into batches of the test's size, stopping as _page_transfer stops")
    return frozenset(fixed)


def _forget_tree_modules() -> None:
    """Drop the modules a failed import of the tree left, and the custom operators they registered: a tree that
    registers its operators unguarded (0.5.1's direct_register_custom_op) would otherwise refuse its own second import."""
    import torch.library

    names = [n for n in sys.modules if n == "sglang" or n.startswith("sglang.")]
    for name in names:
        for value in list(vars(sys.modules[name]).values()):
            if isinstance(value, torch.library.Library) and getattr(value, "m", None) is not None:
                value._destroy()
        del sys.modules[name]


def current() -> Runtime | None:
    """The runtime this process imported, if any."""
    return _RUNTIME


def _adds_a_page(memory_pool_host: types.ModuleType) -> bool:
    """Whether HostKVCache.__init__ sizes the pool one page past int(device * ratio) (`... // self.page_size + 1`)."""
    cls = getattr(memory_pool_host, "HostKVCache", None)
    try:
        source = inspect.getsource(cls.__init__) if cls is not None else ""
    except (OSError, TypeError):
        source = ""
    return "self.size - (self.size % self.page_size)" not in source


def refused(tree: SglangTree) -> dict[str, str]:
    """The layouts of `tree` the imported runtime refuses (none before it is imported, or for another tree)."""
    if _RUNTIME is None or _RUNTIME.tree.import_root != tree.import_root:
        return {}
    return dict(_RUNTIME.refused)


def notes(tree: SglangTree) -> list[str]:
    """What the imported runtime stands in or found elsewhere in `tree`, each with its evidence."""
    if _RUNTIME is None or _RUNTIME.tree.import_root != tree.import_root:
        return []
    return list(_RUNTIME.notes)


def _import_all(tree: SglangTree, layouts: list[Layout], notes: list[str]) -> tuple[dict[str, types.ModuleType], dict[str, str]]:
    """The shared modules (a failure refuses the tree) and each layout's own (a failure refuses that layout)."""
    modules: dict[str, types.ModuleType] = {}
    refused: dict[str, str] = {}
    failures: dict[str, LiveImportError] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # import-time notices about CUDA-only quantization kernels
        for layout in layouts:  # the layout's own modules first: a tree that cannot import them is named by them
            for short, entry in layout.modules.items():
                if short in modules:
                    continue
                try:
                    modules[short] = _import(tree, entry, notes)
                except Exception as exc:
                    if isinstance(exc, ModuleNotFoundError) and _stand_in_needed(exc):
                        raise
                    failures[layout.key] = LiveImportError(_dotted(entry), tree, exc)
                    break
        if layouts and len(failures) == len(layouts):  # no layout imports: the tree does not, named by its first layout
            raise next(iter(failures.values()))
        refused.update((key, str(error)) for key, error in failures.items())
        for short, entry in {**MODULES, **OPTIONAL_MODULES}.items():
            try:
                modules[short] = _import(tree, entry, notes)
            except ModuleNotFoundError as exc:
                if _stand_in_needed(exc):
                    raise
                if short in OPTIONAL_MODULES and exc.name and exc.name.startswith("sglang"):
                    continue  # an older or newer tree without that module
                raise LiveImportError(_dotted(entry), tree, exc) from None
            except Exception as exc:
                raise LiveImportError(_dotted(entry), tree, exc) from None
    return modules, refused


def _dotted(entry: "str | Module") -> str:
    return entry if isinstance(entry, str) else entry.dotted


def _import(tree: SglangTree, entry: "str | Module", notes: list[str]) -> types.ModuleType:
    located = locate_module(tree.package, entry)
    module = importlib.import_module(located.dotted)
    if located.evidence is not None and located.evidence not in notes:
        notes.append(located.evidence)
    return module


def _stand_in_needed(exc: ModuleNotFoundError) -> bool:
    return (exc.name or "").partition(".")[0] in STAND_INS and not any(isinstance(f, STAND_INS[exc.name.partition(".")[0]]) for f in sys.meta_path)


def _stand_in_for(exc: ModuleNotFoundError, tree: SglangTree) -> str:
    """Install the stand-in of the package `exc` names (or re-raise it as the tree's import error), with its evidence."""
    package = (exc.name or "").partition(".")[0]
    if not _stand_in_needed(exc):
        raise LiveImportError("sglang", tree, exc) from None
    stand_in = STAND_INS[package]
    stand_in.install()
    importer = next((f for f in reversed(traceback.extract_tb(exc.__traceback__)) if str(tree.package) in f.filename), None)
    where = f" (first at sglang/{Path(importer.filename).relative_to(tree.package)}:{importer.lineno}: `{(importer.line or '').strip()}`)" if importer else ""
    return (f"{stand_in.SHIM}: {package} is not installed here{where}; it stands in for the names the tree imports, each "
            f"raising if called, and a layout whose driven copy would call one is refused")


def apply_shims(modules: dict[str, types.ModuleType], layouts: list[Layout], refused: dict[str, str], notes: list[str]) -> shims.DirectCopy:
    """The host-pool shims, on the host-pool modules of the layouts run (the fork's memory_pool_host, or 0.5.2x's pool_host
    package); CUDA streams read from torch.cpu where a module creates them itself; a layout whose direct copies still call
    a stand-in is refused."""
    names = dict.fromkeys(name for layout in layouts for name in layout.host_pool_modules)
    direct_copy = shims.DirectCopy()
    for name in names:
        module = modules.get(name)
        if module is None:
            continue
        shims.unpin_host_pool(module)
        direct_copy = shims.install_direct_copy(module, direct_copy)
        if name in PAGE_FIRST_COPY_MODULES:
            shims.install_page_first_direct_copy(module)
        calls = shims.stand_ins_on_direct_path(module)
        for layout in layouts:
            if calls and name in layout.host_pool_modules:
                refused[layout.key] = (f"{OPTION}: the direct IO backend's copies call a stand-in of a GPU-only kernel "
                                       f"({'; '.join(calls)}): no CPU path to drive")
    for name in STREAM_MODULES:
        module = modules.get(name)
        where = shims.install_cpu_streams(module) if module is not None else None
        if where is not None:
            notes.append(f"cpu-streams: {where}: its CUDA streams and events are torch.cpu's (work on CPU is done when issued)")
    return direct_copy


def ensure_process_group(runtime: Runtime, rank: int = 0, world_size: int = 1) -> object:
    """Upstream's own distributed init (gloo) once per process; returns its TP cpu group.

    One rank: a private gloo group of one. Several ranks (a multi-rank launch,
    torch.distributed already joined by the harness): upstream's world and
    tensor-parallel groups over the same ranks, created by every rank together.
    """
    if "tp_cpu_group" in runtime.distributed:
        if runtime.distributed["world_size"] != world_size:
            raise ConfigError("world_size", world_size, f"the {runtime.distributed['world_size']} rank(s) this process joined first")
        return runtime.distributed["tp_cpu_group"]
    ps = runtime.module("parallel_state")
    import torch.distributed as dist

    init_method = "env://"
    if not dist.is_initialized():
        if world_size != 1:
            raise ConfigError("world_size", world_size, "1, or a process that joined torch.distributed first")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            init_method = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ps.init_distributed_environment(world_size=world_size, rank=rank, distributed_init_method=init_method, local_rank=rank, backend="gloo")
        if not ps.model_parallel_is_initialized():
            # 0.5.2x reads the widths from the published server args (runtime_context.publish) instead.
            widths = {"tensor_model_parallel_size": world_size} if "tensor_model_parallel_size" in inspect.signature(ps.initialize_model_parallel).parameters else {}
            ps.initialize_model_parallel(backend="gloo", **widths)
    runtime.distributed.update(tp_cpu_group=ps.get_tp_group().cpu_group, world_size=world_size)
    return runtime.distributed["tp_cpu_group"]
