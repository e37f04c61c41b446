"""The rank process of a multi-rank run: join the group, run the scenarios, report.

Each rank joins a process group (gloo on CPU, nccl with one GPU per rank),
runs the launch's scenarios in order through a RankContext (driver.py; the
group is reused) and writes its traces and observations to a file the parent
reads. After each scenario the ranks agree, through the store rather than a
collective, whether to go on. A heartbeat (heartbeat.py) names where a rank hung.
"""

from __future__ import annotations

import datetime
import os
import pickle
import sys
import traceback
from pathlib import Path
from typing import Any

import torch

from conformance.multirank.decisions import DecisionExchange
from conformance.multirank.driver import RankContext
from conformance.multirank.heartbeat import Heartbeat, write_atomic
from conformance.multirank.records import Launch, RankScenarioResult


def rank_main(plan: Launch, rank: int) -> None:
    import torch.distributed as dist

    workdir = Path(plan.workdir)
    heartbeat = Heartbeat(workdir / f"heartbeat{rank}.txt")
    results: dict[str, Any] = {"fatal": None, "scenarios": []}
    out_path = workdir / f"results{rank}.pkl"
    status = 0
    try:
        heartbeat.phase("joining the process group", setup=True)
        torch.set_num_threads(1)  # several ranks share few cores
        if sys.platform == "linux":
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
            os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
        timeout = datetime.timedelta(seconds=plan.collective_timeout_s)
        store = dist.TCPStore("127.0.0.1", plan.store_port, None, False, timeout)
        if plan.device == "cuda":
            torch.cuda.set_device(rank)
            backend, device = "nccl", f"cuda:{rank}"
        else:
            backend, device = "gloo", "cpu"
        dist.init_process_group(backend, store=store, rank=rank, world_size=plan.world_size, timeout=timeout)
        adapter = plan.adapter.load() if plan.adapter is not None else None

        def save_partial(partial: RankScenarioResult) -> None:
            # A failed scenario's result reaches the parent even if cleanup then hangs.
            write_atomic(out_path, pickle.dumps({**results, "scenarios": [*results["scenarios"], partial]}))

        for index, scenario in enumerate(plan.scenarios):
            exchange = DecisionExchange(store, rank, plan.world_size, index, plan.collective_timeout_s)
            ctx = RankContext(plan, rank, index, scenario, device, adapter, heartbeat, exchange, save_partial)
            result = ctx.run()
            results["scenarios"].append(result)
            write_atomic(out_path, pickle.dumps(results))
            if not _agree_all_ok(store, plan, rank, index, result.error is None, heartbeat):
                break
        heartbeat.phase("waiting for every rank to finish")
        _store_barrier(store, plan, "exit", rank)
    except BaseException:
        results["fatal"] = traceback.format_exc(limit=8)
        status = 1
    finally:
        write_atomic(out_path, pickle.dumps(results))
        heartbeat.stop()
        if dist.is_initialized():
            dist.destroy_process_group()
    sys.exit(status)


def _agree_all_ok(store, plan: Launch, rank: int, index: int, ok: bool, heartbeat: Heartbeat) -> bool:
    """After each scenario, through the store (not a collective): go on only if every rank succeeded."""
    heartbeat.phase(f"scenario {index} done, waiting for every rank")
    store.set(f"scenario{index}/rank{rank}", b"ok" if ok else b"failed")
    keys = [f"scenario{index}/rank{r}" for r in range(plan.world_size)]
    store.wait(keys, datetime.timedelta(seconds=plan.collective_timeout_s))
    return all(store.get(k) == b"ok" for k in keys)


def _store_barrier(store, plan: Launch, name: str, rank: int) -> None:
    store.set(f"{name}/rank{rank}", b"1")
    store.wait([f"{name}/rank{r}" for r in range(plan.world_size)], datetime.timedelta(seconds=plan.collective_timeout_s))
