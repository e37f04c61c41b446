"""Rank processes: the one way this project starts torch.distributed ranks, for the harness and for tests.

`RankProcesses` hosts the TCP store in the parent, starts the ranks and tears
them down; the harness's multi-rank launch (launch.py) supervises its own
ranks with it. `run_ranks` is the whole round trip for a test: every rank
joins a process group through the parent's store, runs a function, and the
parent gets each rank's return value or names the rank that failed or hung.

Processes come from a forkserver that imports torch once (each rank is then
forked from a process that never touched CUDA or started a thread), or from
spawn where there is no forkserver; never from fork after torch is imported.

Teardown order, and why: a rank's process group and store client talk to the
store until they are destroyed, some of it on their own C++ threads. So the
store lives in the parent and is released only after every rank has exited;
each rank waits (through the store) until every rank finished, then destroys
its group while its interpreter is fully alive. A rank that hosted the store
itself took it down when it exited, while a peer was still tearing down: the
peer's threads met a closed connection as its interpreter finalized, and it
aborted ("terminate called without an active exception"), more often the
busier the machine.
"""

from __future__ import annotations

import datetime
import importlib
import importlib.util
import multiprocessing
import multiprocessing.connection
import os
import pickle
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from conformance.errors import ConformanceFailure
from conformance.bounds import COLLECTIVE_S, EXIT_S, STARTUP_S
from spec.errors import ConfigError

STORE_HOST = "127.0.0.1"
# Imported once in the forkserver: every rank forked from it finds them loaded. The
# harness's rank side too: the first launch of a process fixes the list, whoever makes it.
PRELOAD = ("torch", "torch.distributed", "conformance.multirank.rank")


class RankFailure(ConformanceFailure):
    """A rank raised, crashed or hung; the message names each such rank and what it reported."""


def process_context(preload: Sequence[str] = ()) -> multiprocessing.context.BaseContext:
    """A forkserver context preloading torch (and `preload`), or spawn where there is no forkserver."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    # Effective only before the server starts (the first launch of this process).
    ctx.set_forkserver_preload(list(dict.fromkeys([*PRELOAD, *preload])))
    return ctx


def host_store(timeout_s: float) -> Any:
    """A TCP store served by this process, on a port the OS picks (no race for a "free" port)."""
    import torch.distributed as dist

    return dist.TCPStore(STORE_HOST, 0, None, True, datetime.timedelta(seconds=timeout_s), wait_for_workers=False)


def _import_then_run(modules: Sequence[str], target: Callable[..., None], *args: Any) -> None:
    """In the rank: what the forkserver did not preload (another launch started it first, with its own list) is imported here,
    before the target runs, so that the cost counts as the rank's start-up and not as a step it hangs in."""
    for name in modules:
        importlib.import_module(name)
    target(*args)


class RankProcesses:
    """world_size rank processes and the store they meet at; `with` tears them down in order.

    Leaving the block kills the ranks still alive, waits for every one to
    exit, and only then releases the store.
    """

    def __init__(self, world_size: int, *, store_timeout_s: float = COLLECTIVE_S, preload: Sequence[str] = ()) -> None:
        if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
            raise ConfigError("world_size", world_size, "an integer >= 1")
        self.world_size = world_size
        self.store_timeout_s = store_timeout_s
        self.preload = tuple(preload)
        self.store: Any = None
        self.procs: list[Any] = []

    @property
    def port(self) -> int:
        if self.store is None:
            raise RuntimeError("the store is hosted only inside `with RankProcesses(...)`")
        return self.store.port

    def __enter__(self) -> "RankProcesses":
        self.store = host_store(self.store_timeout_s)
        return self

    def start(self, target: Callable[..., None], args_for: Callable[[int], tuple]) -> list[Any]:
        """Start target(*args_for(rank)) in each rank process, named rank<r>."""
        ctx = process_context(self.preload)
        wanted = tuple(dict.fromkeys([*PRELOAD, *self.preload]))
        self.procs = [ctx.Process(target=_import_then_run, args=(wanted, target, *args_for(rank)), name=f"rank{rank}", daemon=True)
                      for rank in range(self.world_size)]
        for proc in self.procs:
            proc.start()
        return self.procs

    def wait(self, timeout_s: float) -> list[int]:
        """Wait until every rank exited or timeout_s passed; the ranks still running."""
        deadline = time.monotonic() + timeout_s
        while True:
            alive = [rank for rank, proc in enumerate(self.procs) if proc.exitcode is None]
            left = deadline - time.monotonic()
            if not alive or left <= 0:
                return alive
            multiprocessing.connection.wait([self.procs[rank].sentinel for rank in alive], timeout=left)

    def __exit__(self, *exc: object) -> None:
        try:
            for proc in self.procs:
                if proc.pid is not None and proc.is_alive():
                    proc.kill()
            for proc in self.procs:
                if proc.pid is not None:
                    proc.join(EXIT_S)
        finally:
            self.store = None  # the last reference: the store closes once no rank can still reach it


# --- run_ranks: a function on every rank, its return values back ------------------------


@dataclass
class RankEnv:
    """What a rank's function receives: who it is, the group it joined and the parent's store."""

    rank: int
    world_size: int
    workdir: Path
    store: Any  # this rank's client of the parent's TCP store (keys a test may set and wait for)
    timeout: datetime.timedelta

    @property
    def group(self) -> Any:
        import torch.distributed as dist

        return dist.group.WORLD


@dataclass(frozen=True)
class _RankCall:
    target: str
    args: tuple
    world_size: int
    port: int
    workdir: str
    timeout_s: float
    backend: str
    sys_path: tuple[str, ...]


def _split_target(spec: str) -> tuple[str, str]:
    module_name, sep, function = spec.rpartition(":")
    if not sep or not module_name or not function.isidentifier():
        raise ConfigError("rank target", spec, "'module:function' or 'path/to/file.py:function'")
    if module_name.endswith(".py") and not Path(module_name).is_file():
        raise ConfigError("rank target", spec, "an existing Python file before the ':'")
    return module_name, function


def load_target(spec: str) -> Callable[..., Any]:
    """'package.module:function', or 'path/to/file.py:function' (a test module, loaded by its path)."""
    module_name, function = _split_target(spec)
    if module_name.endswith(".py"):
        path = Path(module_name)
        name = f"_rank_target_{path.stem}"
        module = sys.modules.get(name)
        if module is None:
            loader_spec = importlib.util.spec_from_file_location(name, path)
            if loader_spec is None or loader_spec.loader is None:
                raise ConfigError("rank target", spec, "a readable Python file")
            module = importlib.util.module_from_spec(loader_spec)
            sys.modules[name] = module
            loader_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(module_name)
    return getattr(module, function)


def _result_path(workdir: str | Path, rank: int) -> Path:
    return Path(workdir) / f"rank{rank}.result.pkl"


def _rank_entry(call: _RankCall, rank: int) -> None:
    import torch
    import torch.distributed as dist

    sys.path[:] = list(dict.fromkeys([*call.sys_path, *sys.path]))  # the parent's, where the test's helpers live
    torch.set_num_threads(1)  # several ranks share few cores
    if sys.platform == "linux":
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    timeout = datetime.timedelta(seconds=call.timeout_s)
    outcome: dict[str, Any] = {"value": None, "error": None}
    store = None
    try:
        store = dist.TCPStore(STORE_HOST, call.port, None, False, timeout)
        dist.init_process_group(call.backend, store=store, rank=rank, world_size=call.world_size, timeout=timeout)
        env = RankEnv(rank, call.world_size, Path(call.workdir), store, timeout)
        outcome["value"] = load_target(call.target)(env, *call.args)
    except BaseException:
        outcome["error"] = traceback.format_exc(limit=12)
    try:
        blob = pickle.dumps(outcome)
    except Exception:
        blob = pickle.dumps({"value": None, "error": f"the return value could not be pickled:\n{traceback.format_exc(limit=4)}"})
    _result_path(call.workdir, rank).write_bytes(blob)
    try:
        if store is not None:
            # Nobody takes its group down while a peer may still use it; a failed rank does not wait.
            store.set(f"finished/rank{rank}", b"failed" if outcome["error"] else b"ok")
            if not outcome["error"]:
                store.wait([f"finished/rank{r}" for r in range(call.world_size)], timeout)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    if outcome["error"]:
        raise SystemExit(1)


def run_ranks(
    target: str,
    world_size: int = 2,
    *,
    args: Sequence[Any] = (),
    workdir: Path,
    timeout_s: float = STARTUP_S,
    collective_timeout_s: float = COLLECTIVE_S,
    backend: str = "gloo",
    preload: Sequence[str] = (),
) -> list[Any]:
    """target(RankEnv, *args) on world_size ranks of one process group; the return values by rank.

    target: 'module:function' or 'path/file.py:function'. Raises RankFailure
    naming every rank that raised (with its traceback), crashed (its exit
    code) or was still running after timeout_s (then killed).
    """
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    _split_target(target)  # a malformed target fails here, once, not in every rank
    with RankProcesses(world_size, store_timeout_s=collective_timeout_s, preload=preload) as ranks:
        call = _RankCall(target, tuple(args), world_size, ranks.port, str(workdir), collective_timeout_s, backend, tuple(sys.path))
        ranks.start(_rank_entry, lambda rank: (call, rank))
        hung = ranks.wait(timeout_s)
    problems, values = [], []
    for rank, proc in enumerate(ranks.procs):
        path = _result_path(workdir, rank)
        outcome = pickle.loads(path.read_bytes()) if path.exists() else None
        if rank in hung:
            problems.append(f"rank {rank} still running after {timeout_s:g}s (killed)" + ("; it had returned" if outcome else ""))
        elif outcome is None:
            problems.append(f"rank {rank} exited with code {proc.exitcode} before reporting a result")
        elif outcome["error"]:
            problems.append(f"rank {rank} raised:\n{outcome['error']}")
        elif proc.exitcode != 0:
            problems.append(f"rank {rank} returned, then exited with code {proc.exitcode} (its teardown failed)")
        values.append(None if outcome is None else outcome["value"])
    if problems:
        raise RankFailure(f"{target} on {world_size} ranks:\n" + "\n".join(problems))
    return values
