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
import types
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from conformance.live import shims
from conformance.live.layout import Layout
from conformance.live.layouts import BY_KEY
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

    def module(self, name: str) -> types.ModuleType:
        return self.modules[name]


_RUNTIME: Runtime | None = None

# Set by load(): multi-rank launches fork their ranks from a server that imports
# the adapter's module; that import loads the same tree (adapter.py), so a rank
# does not spend its hang budget importing SGLang.
PRELOAD_ENV = "CONFORMANCE_SGLANG_LIVE_TREE"

# Upstream modules every live session uses, by short name.
MODULES = {
    "cache_controller": "sglang.srt.managers.cache_controller",
    "memory_pool_host": "sglang.srt.mem_cache.memory_pool_host",
    "memory_pool": "sglang.srt.mem_cache.memory_pool",
    "allocator": "sglang.srt.mem_cache.allocator",
    "base_prefix_cache": "sglang.srt.mem_cache.base_prefix_cache",
    "radix_cache": "sglang.srt.mem_cache.radix_cache",
    "cache_init_params": "sglang.srt.mem_cache.cache_init_params",
    "hicache_storage": "sglang.srt.mem_cache.hicache_storage",
    "server_args": "sglang.srt.server_args",
    "parallel_state": "sglang.srt.distributed.parallel_state",
}
OPTIONAL_MODULES = {
    "hybrid_cache_controller": "sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller",
    "poll_timer": "sglang.srt.utils.poll_timer",  # 0.5.23's prefetch wait timer; 0.5.22 reads time.monotonic instead
}
# Modules whose `time.monotonic` is the harness's clock (the injected-clock shim).
CLOCKED = ("hiradix_cache", "cache_controller", "hybrid_cache_controller", "hi_mamba_radix_cache", "unified_radix_cache")
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
    """Import `tree` (once per process) with the shims applied."""
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
    modules: dict[str, types.ModuleType] = {}
    wanted: dict[str, str] = {}
    layouts = [BY_KEY[key] for key in tree.layouts]
    for layout in layouts:  # the layout's own modules first: a tree that cannot import them is named by them
        wanted.update(layout.modules)
    wanted.update(MODULES)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # import-time notices about CUDA-only quantization kernels
        for short, name in {**wanted, **OPTIONAL_MODULES}.items():
            try:
                modules[short] = importlib.import_module(name)
            except ModuleNotFoundError as exc:
                if short in OPTIONAL_MODULES and short not in wanted and exc.name and exc.name.startswith("sglang"):
                    continue  # an older tree without that module
                raise LiveImportError(name, tree, exc) from None
            except Exception as exc:
                raise LiveImportError(name, tree, exc) from None
    first = next(iter(layouts[0].modules))
    imported_from = Path(modules[first].__file__).resolve()
    if tree.package.resolve() not in imported_from.parents:
        raise ConfigError(OPTION, tree.given, f"a tree that is not shadowed (sglang was imported from {imported_from})")
    logging.getLogger("sglang").setLevel(logging.ERROR)
    direct_copy = apply_shims(modules, layouts)
    shims.install_prompt_reset(modules["cache_controller"])
    clock = shims.InjectedTime()
    shims.inject_clock([m for k, m in modules.items() if k in CLOCKED], clock,
                       perf_counter_modules=[m for k, m in modules.items() if k in PERF_CLOCKED])
    _RUNTIME = Runtime(tree, modules, direct_copy, clock, stand_in, modules["server_args"].ServerArgs)
    os.environ[PRELOAD_ENV] = tree.given
    return _RUNTIME


def apply_shims(modules: dict[str, types.ModuleType], layouts: list[Layout]) -> shims.DirectCopy:
    """The host-pool shims, on the host-pool modules of the layouts run (the fork's memory_pool_host, or 0.5.2x's pool_host package)."""
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
