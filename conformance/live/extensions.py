"""A tree's JIT-built C++ helpers: built in a folder the run owns, once, before any test or rank needs them.

Trees from 0.5.15 on hash storage pages with a native helper that torch's
cpp_extension.load builds the first time a node is hashed. torch builds into one
folder shared by every run of the user (~/.cache/torch_extensions), under a lock
file it waits on without a bound: a build killed midway leaves that file, and
every later run that hashes waits forever. Runs of trees in different folders
also rebuild it in turn (its build file names the source's path). So, unless TORCH_EXTENSIONS_DIR is set,
a live run builds into a fresh folder of its own (about 6 s on two cores), which
its xdist workers and rank processes inherit, and removes it when the process
that made it exits. And the tree's page hash runs once as the tree loads, under
the startup bound: a multi-rank scenario's first backup would otherwise spend the
hang bound waiting on the build.
"""

from __future__ import annotations

import atexit
import importlib
import os
import shutil
import tempfile
from typing import Callable, MutableMapping

from conformance.gates import GateTimeout
from conformance.scenarios.races import Background
from spec.errors import ConfigError

ENV = "TORCH_EXTENSIONS_DIR"
PREFIX = "hicache-conformance-torch-extensions-"
HASH_MODULE, HASH_FUNCTION = "sglang.srt.mem_cache.utils", "get_hash_str"  # the page hash of every storage backup


def own_build_folder(environ: MutableMapping[str, str] = os.environ) -> str | None:
    """Point torch's extension builds at a fresh folder of this run's; None where the environment names one already."""
    if environ.get(ENV):
        return None
    folder = tempfile.mkdtemp(prefix=PREFIX)
    environ[ENV] = folder
    atexit.register(shutil.rmtree, folder, True)
    return folder


def tree_page_hash() -> Callable[[list[int]], object] | None:
    """The imported tree's page hash, where it has one."""
    try:
        return getattr(importlib.import_module(HASH_MODULE), HASH_FUNCTION, None)
    except ImportError:
        return None


def build_ahead(page_hash: Callable[[list[int]], object], seconds: float) -> str | None:
    """Hash one page now, so a JIT build behind the hash happens here and within `seconds`.

    Returns None, or a note naming why the hash failed (a test that hashes then
    fails with the tree's own error). A hash that does not finish in time is one
    error line naming the folder and the lock file that stalls it.
    """
    call = Background("the tree's page hash", page_hash, [1, 2, 3, 4], timeout_s=seconds)
    try:
        call.result()
    except GateTimeout:
        folder = os.environ.get(ENV, "")
        raise ConfigError(ENV, folder, f"a folder where the tree's page hash (its JIT-built helper) is ready within {seconds:g} s; "
                                       f"a lock file an interrupted build left there waits forever: remove {folder}/*/lock, "
                                       f"or unset {ENV} so the run builds in a folder of its own") from None
    except Exception as exc:  # a note: the run goes on, and the tests that hash show the tree's own error
        return f"the tree's page hash fails here: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
    return None
