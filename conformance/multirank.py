"""Real multi-rank runs: one process per rank over torch.distributed.

The parent (a pytest worker) hosts a TCP store on 127.0.0.1 at a port the OS
picks at run time, starts world_size processes and waits for them within a
bound. Each rank joins a process group (gloo on CPU, nccl with one GPU per
rank), creates caches through the adapter with env.process_group set, runs a
list of scenarios in one launch (process start-up dominates; the group is
reused) and writes its traces and observations to a file the parent reads.

Processes come from a forkserver: a fresh server process imports torch once,
and every rank is forked from it (as safe as spawn, CUDA included, since the
server never touches CUDA; a launch then costs about 0.1 s instead of seconds).

Hangs: every rank runs a heartbeat thread that writes its current scenario
step and last trace event to a small file. When no live rank's heartbeat
changed for hang_timeout_s, the parent kills every rank and reports
"rank R hung at step S (last event ...)". Collectives also carry a timeout
(init_process_group(timeout=...)) as a backstop.

Determinism: each rank's cache gets an IoValve as its trace gate. It parks
every storage->host load of the prefetches a scenario controls, so a scenario
moves each rank's IO forward stage by stage (rank 0 fast, rank 1 slow, one
rank's extra pool pending, ...) before each scheduler step, and can move it
between a rank's vote and its terminate (window 2). Waits are bounded and
driven by trace events, never by sleeps. The valve assumes the implementation's
IO thread serves prefetches one at a time, in order (as the shared core does).

Only the adapter protocol is used to reach an implementation.
"""

from __future__ import annotations

import datetime
import itertools
import json
import multiprocessing
import multiprocessing.connection
import os
import pickle
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch

from conformance.adapter import ENTRY_POINT_GROUP, CacheAdapter, CacheEnv
from conformance.gates import GateTimeout, InjectedFault
from conformance.loader import load_factory
from spec.clock import ManualClock
from spec.config import TerminationConfig
from spec.decision import VOTE_COLLECTIVE
from spec.errors import ConfigError
from spec.fence import UNTRACKED_COMMIT_PAGES, HitPolicy, PoolProgress, committable_pages
from spec.invariants import check
from spec.trace import BACKUP, LOAD, Event, EventKind, Trace, TraceRecorder

PAGE_SIZE = 4
REQUEST_PAGES = 4
BATCH_PAGES = 2  # KV arrives in two batches, so "partial" is a reachable level
LEVELS = ("partial", "kv", "done")  # how far a rank's IO for one prefetch has gone (see CacheHandle.to)


class MultiRankError(AssertionError):
    """A multi-rank launch failed: a rank hung, crashed or could not start."""


# --- what travels from the parent to the ranks ---------------------------------


@dataclass(frozen=True)
class AdapterRef:
    """How a rank process finds the adapter: the pickled object, an entry point name, or a factory spec."""

    kind: str  # "pickle" | "entry_point" | "factory"
    value: Any
    name: str

    def load(self) -> CacheAdapter:
        if self.kind == "pickle":
            return pickle.loads(self.value)
        if self.kind == "entry_point":
            for ep in entry_points(group=ENTRY_POINT_GROUP):
                if ep.name == self.value:
                    return ep.load()()
            raise ConfigError("adapter entry point", self.value, f"a name registered in {ENTRY_POINT_GROUP}")
        if self.kind == "factory":
            return load_factory(self.value)()
        raise ConfigError("AdapterRef.kind", self.kind, "pickle, entry_point or factory")


def adapter_ref(impl: CacheAdapter, cli_specs: Sequence[str] = ()) -> AdapterRef:
    """A reference to `impl` that a fresh process can resolve.

    Picklable adapters (the built-ins are frozen dataclasses) travel as they
    are; others are found again by entry point name or by the --cache-impl
    factory spec that produced an adapter of the same name.
    """
    try:
        blob = pickle.dumps(impl)
        if getattr(pickle.loads(blob), "name", None) == impl.name:
            return AdapterRef("pickle", blob, impl.name)
    except Exception:  # not picklable: fall back to a name
        pass
    for spec in cli_specs:
        if getattr(load_factory(spec)(), "name", None) == impl.name:
            return AdapterRef("factory", spec, impl.name)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == impl.name:
            return AdapterRef("entry_point", ep.name, impl.name)
    raise ConfigError("impl", impl.name, "a picklable adapter, a registered entry point or a --cache-impl factory spec")


@dataclass(frozen=True)
class Scenario:
    """A scenario function (by name, from SCENARIOS) and its keyword arguments."""

    name: str
    params: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.name not in SCENARIOS:
            raise ConfigError("scenario", self.name, "one of " + ", ".join(sorted(SCENARIOS)))

    @property
    def label(self) -> str:
        args = ", ".join(f"{k}={_short(v)}" for k, v in sorted(self.params.items()))
        return f"{self.name}({args})"


def _short(value: Any) -> str:
    text = repr(value)
    if len(text) > 40 and isinstance(value, (list, tuple)):
        return f"<{len(value)} items>"
    return text


@dataclass(frozen=True)
class Launch:
    adapter: AdapterRef | None
    world_size: int
    device: str  # "cpu" or "cuda"
    scenarios: tuple[Scenario, ...]
    workdir: str
    store_port: int
    collective_timeout_s: float
    wait_timeout_s: float


# --- what travels back ------------------------------------------------------------


@dataclass(frozen=True)
class CheckRecord:
    """One scheduler step on one rank: the agreed id list and what finished."""

    cache: int
    label: str
    ids: tuple[str, ...]
    finished: Mapping[str, int]
    untracked: frozenset[str]  # ids this rank had already dropped (aborted)


@dataclass(frozen=True)
class LoadRecord:
    cache: int
    request_id: str
    tokens: int  # what load_back put on the device
    error: str | None  # bytes differ from the generated bytes (S5)


@dataclass
class RankScenarioResult:
    scenario: str
    rank: int
    phase: str = "start"
    error: str | None = None
    traces: list[Trace] = field(default_factory=list)
    configs: list[TerminationConfig] = field(default_factory=list)
    pools: dict[str, str] = field(default_factory=dict)  # pool -> hit policy value
    requested: dict[str, int] = field(default_factory=dict)
    checks: list[CheckRecord] = field(default_factory=list)
    loads: list[LoadRecord] = field(default_factory=list)
    matches: dict[str, tuple[int, int]] = field(default_factory=dict)
    leftover_threads: list[str] = field(default_factory=list)
    leaks: list[str] = field(default_factory=list)
    notes: dict[str, Any] = field(default_factory=dict)


@dataclass
class ScenarioOutcome:
    """One scenario as every rank saw it."""

    scenario: Scenario
    ranks: list[RankScenarioResult]

    def finished_at(self, request_id: str) -> dict[int, tuple[str, int] | None]:
        """rank -> (step label, committed tokens) of the check that finished request_id there."""
        out: dict[int, tuple[str, int] | None] = {}
        for r in self.ranks:
            out[r.rank] = next(((c.label, c.finished[request_id]) for c in r.checks if request_id in c.finished), None)
        return out

    def commits(self, request_id: str, cache: int = 0) -> dict[int, int]:
        """rank -> tokens in that rank's COMMIT event for request_id."""
        out = {}
        for r in self.ranks:
            for e in r.traces[cache].events:
                if e.kind is EventKind.COMMIT and e.op == request_id:
                    out[r.rank] = int(e.value)
        return out

    def problems(self) -> list[str]:
        return scenario_problems(self)


@dataclass
class LaunchResult:
    outcomes: list[ScenarioOutcome]
    fatal: list[str]
    wall_s: float


# --- the parent ---------------------------------------------------------------------

_FORKSERVER_PRELOAD = ["torch", "torch.distributed", "conformance.multirank"]


def _process_context(preload: Sequence[str]) -> multiprocessing.context.BaseContext:
    methods = multiprocessing.get_all_start_methods()
    if "forkserver" not in methods:
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    # Effective only before the server starts (the first launch of this process).
    ctx.set_forkserver_preload([*_FORKSERVER_PRELOAD, *preload])
    return ctx


def cuda_devices_needed(world_size: int) -> str | None:
    """None when every rank can have its own GPU, else the reason to skip."""
    if not torch.cuda.is_available():
        return "no CUDA device visible"
    count = torch.cuda.device_count()
    if count < world_size:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        pinned = f" (CUDA_VISIBLE_DEVICES={visible!r}; under xdist each worker is pinned to one GPU: run without -n to cover this)" if visible is not None else ""
        return f"{world_size} ranks need {world_size} CUDA devices, one per rank (nccl cannot share one); {count} visible{pinned}"
    return None


def launch(
    adapter: AdapterRef | None,
    scenarios: Sequence[Scenario],
    *,
    world_size: int,
    device: str,
    workdir: Path,
    hang_timeout_s: float = 8.0,
    collective_timeout_s: float = 30.0,
    wait_timeout_s: float = 20.0,
    total_timeout_s: float = 300.0,
    startup_timeout_s: float = 90.0,
    preload: Sequence[str] = (),
) -> LaunchResult:
    """Run `scenarios` on `world_size` rank processes; raise MultiRankError on a hang or crash.

    A scenario that fails on some rank is not raised here: its outcome carries
    the rank's error (see scenario_problems), and the ranks skip the rest.
    """
    import torch.distributed as dist

    if device not in ("cpu", "cuda"):
        raise ConfigError("device", device, "'cpu' or 'cuda' (each rank uses cuda:<rank>)")
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 2:
        raise ConfigError("world_size", world_size, "an integer >= 2")
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    # The parent hosts the store on a port the OS picks: no race for a "free" port.
    store = dist.TCPStore("127.0.0.1", 0, None, True, datetime.timedelta(seconds=collective_timeout_s), wait_for_workers=False)
    plan = Launch(adapter, world_size, device, tuple(scenarios), str(workdir), store.port, collective_timeout_s, wait_timeout_s)
    ctx = _process_context(preload)
    procs = [ctx.Process(target=_rank_main, args=(plan, rank), name=f"rank{rank}", daemon=True) for rank in range(world_size)]
    try:
        for proc in procs:
            proc.start()
        hang = _supervise(procs, workdir, hang_timeout_s, total_timeout_s, startup_timeout_s)
    finally:
        for proc in procs:
            if proc.pid is None:
                continue  # never started
            if proc.is_alive():
                proc.kill()
            proc.join(10)
        del store
    results = [_read_results(workdir, rank) for rank in range(world_size)]
    fatal = [f"rank {rank}: {res['fatal']}" for rank, res in enumerate(results) if res["fatal"]]
    crashed = [f"rank {rank} exited with code {p.exitcode}" for rank, p in enumerate(procs) if p.exitcode not in (0, None) and not results[rank]["fatal"]]
    if hang:
        errors = [f"rank {r.rank} {r.scenario} at {r.phase}: {r.error}" for res in results for r in res["scenarios"] if r.error]
        raise MultiRankError("\n".join([hang, *errors, *fatal]))
    if fatal or crashed:
        raise MultiRankError("\n".join([*fatal, *crashed]))
    outcomes = []
    for index, scenario in enumerate(plan.scenarios):
        per_rank = [res["scenarios"][index] for res in results if index < len(res["scenarios"])]
        if len(per_rank) == world_size:
            outcomes.append(ScenarioOutcome(scenario, per_rank))
    return LaunchResult(outcomes, fatal, time.monotonic() - started)


def _supervise(procs: list, workdir: Path, hang_timeout_s: float, total_timeout_s: float, startup_timeout_s: float) -> str | None:
    """Wait for every rank; a message naming each stuck rank's step when they stall or run too long.

    A rank counts as stalled once its heartbeat has not changed for
    hang_timeout_s; before its first heartbeat (process start, imports) the
    bound is startup_timeout_s.
    """
    start = time.monotonic()
    beats: dict[int, str] = {}
    changed: dict[int, float] = {rank: start + startup_timeout_s - hang_timeout_s for rank in range(len(procs))}
    while True:
        alive = [rank for rank, p in enumerate(procs) if p.exitcode is None]
        if not alive:
            return None
        multiprocessing.connection.wait([procs[r].sentinel for r in alive], timeout=0.2)
        now = time.monotonic()
        for rank in alive:
            beat = _read_heartbeat(workdir, rank)
            if beat != beats.get(rank):
                beats[rank] = beat
                changed[rank] = now
        alive = [rank for rank, p in enumerate(procs) if p.exitcode is None]
        quiet = min((now - changed[r] for r in alive), default=0.0)
        stalled = bool(alive) and quiet >= hang_timeout_s
        if alive and not stalled and quiet >= min(1.0, hang_timeout_s):
            # Ranks that entered different collectives at the same position can never
            # make progress together: no need to wait out the whole bound.
            stalled = _entered_different_collectives({r: _parse_beat(beats.get(r, ""))["collectives"] for r in alive})
        if stalled or (alive and now - start >= total_timeout_s):
            why = f"no progress for {quiet:.1f}s" if stalled else f"still running after {total_timeout_s:g}s"
            parsed = {rank: _parse_beat(beats.get(rank, "")) for rank in range(len(procs))}
            lines = []
            for rank in alive:
                beat = parsed[rank]
                lines.append(f"rank {rank} hung at step '{beat['phase']}' (last event: {beat['last'] or 'none'})")
            done = [rank for rank in range(len(procs)) if rank not in alive]
            tail = f"; ranks {done} had exited" if done else ""
            divergence = first_divergence({r: b["collectives"] for r, b in parsed.items() if r in alive})
            tail += f"\n{divergence}" if divergence else ""
            return f"multi-rank run stuck ({why}): " + "; ".join(lines) + tail


def _read_heartbeat(workdir: Path, rank: int) -> str:
    try:
        return (workdir / f"heartbeat{rank}.txt").read_text()
    except OSError:
        return ""


def _parse_beat(text: str) -> dict[str, Any]:
    try:
        return json.loads(text)
    except ValueError:
        return {"phase": "starting", "last": "", "collectives": []}


def _collective_name(e: Event) -> str:
    where = [f"op {e.op}"] if e.op is not None else []
    where += [f"step {e.step}"] if e.step is not None else []
    return f"{e.value}({', '.join(where)})"


def _entered_different_collectives(per_rank: Mapping[int, Sequence[str]]) -> bool:
    shortest = min((len(seq) for seq in per_rank.values()), default=0)
    return len(per_rank) > 1 and any(len({seq[i] for seq in per_rank.values()}) > 1 for i in range(shortest))


def first_divergence(per_rank: Mapping[int, Sequence[str]]) -> str | None:
    """The first position where the ranks' collective sequences differ (L3), described."""
    if len(per_rank) < 2:
        return None
    longest = max(len(seq) for seq in per_rank.values())
    for index in range(longest):
        names = {rank: (seq[index] if index < len(seq) else "nothing") for rank, seq in per_rank.items()}
        if len(set(names.values())) > 1:
            detail = ", ".join(f"rank {rank} {name}" for rank, name in sorted(names.items()))
            return f"L3: collective #{index + 1} differs across ranks: {detail}"
    return None


def _read_results(workdir: Path, rank: int) -> dict[str, Any]:
    path = workdir / f"results{rank}.pkl"
    try:
        return pickle.loads(path.read_bytes())
    except FileNotFoundError:
        return {"fatal": None, "scenarios": []}
    except Exception as exc:  # a rank killed mid-write
        return {"fatal": f"unreadable results file {path}: {exc}", "scenarios": []}


def run_or_fail(adapter: AdapterRef | None, scenarios: Sequence[Scenario], *, same_usable_prefix: bool = False, **kwargs: Any) -> list[ScenarioOutcome]:
    """launch(), then fail with every problem of every scenario, naming ranks and steps.

    same_usable_prefix: also require every rank to serve the same prefix after
    load-back (kept apart so that its failures are reported under S4/F4 only).
    """
    result = launch(adapter, scenarios, **kwargs)
    problems = []
    for outcome in result.outcomes:
        found = outcome.problems()
        if same_usable_prefix:
            found += same_usable_prefix_problems(outcome)
        problems += [f"{outcome.scenario.label}: {p}" for p in found]
    missing = [s.label for s in scenarios if s not in [o.scenario for o in result.outcomes]]
    if missing:
        problems.append(f"scenarios not run on every rank (an earlier one failed): {missing}")
    if problems:
        raise MultiRankError("\n".join(problems))
    return result.outcomes


# --- checks across ranks (the parent's oracle) ---------------------------------------


def scenario_problems(outcome: ScenarioOutcome) -> list[str]:
    """Everything the harness requires of any multi-rank scenario, as messages."""
    out: list[str] = []
    for r in outcome.ranks:
        if r.error:
            out.append(f"rank {r.rank} failed at {r.phase}: {r.error}")
    if out:
        return out
    for r in outcome.ranks:
        if r.leftover_threads:
            out.append(f"rank {r.rank}: threads still running after close(): {r.leftover_threads}")
        out += [f"rank {r.rank}: {leak}" for leak in r.leaks]
        out += [f"rank {r.rank}: S5 {load.request_id}: {load.error}" for load in r.loads if load.error]
    caches = min(len(r.traces) for r in outcome.ranks)
    for cache in range(caches):
        config = outcome.ranks[0].configs[cache]
        traces = [r.traces[cache] for r in outcome.ranks]
        out += [f"cache {cache}: {v}" for v in check(traces, config)]
        out += _x4_vote_count(outcome, cache, config)
        out += _commit_oracle_problems(outcome, cache, config)
    out += _same_decisions(outcome)
    out += _same_requested(outcome)
    return out


def same_usable_prefix_problems(outcome: ScenarioOutcome) -> list[str]:
    """After the same commit, every rank can use the same prefix (ranks serve shards of one prefix).

    A rank that attaches a trailing state (F4) where a peer dropped its own
    would serve a longer match there: the ranks' schedulers then disagree.
    """
    loaded: dict[tuple[int, str], dict[int, int]] = {}
    for r in outcome.ranks:
        for load in r.loads:
            loaded.setdefault((load.cache, load.request_id), {})[r.rank] = load.tokens
    out = []
    for (cache, op), by_rank in sorted(loaded.items()):
        if len(set(by_rank.values())) > 1:
            commits = outcome.commits(op, cache)
            detail = ", ".join(f"rank {rank}: {tokens}" for rank, tokens in sorted(by_rank.items()))
            out.append(f"S4/F4 {op}: every rank committed {sorted(set(commits.values()))} tokens, but load-back serves different prefixes ({detail})")
    return out


def _same_decisions(outcome: ScenarioOutcome) -> list[str]:
    """X1/S4 as the scheduler sees them: each step finishes the same ids with the same length on every tracking rank."""
    out = []
    lengths = {len(r.checks) for r in outcome.ranks}
    if len(lengths) > 1:
        return [f"ranks ran different numbers of checks: {[len(r.checks) for r in outcome.ranks]}"]
    for index in range(lengths.pop()):
        records = [r.checks[index] for r in outcome.ranks]
        if len({(c.cache, c.label, c.ids) for c in records}) > 1:
            out.append(f"check {index}: ranks disagree on the agreed list: {[(c.label, c.ids) for c in records]}")
            continue
        for request_id in records[0].ids:
            seen = {r.rank: c.finished.get(request_id) for r, c in zip(outcome.ranks, records) if request_id not in c.untracked}
            if len(set(seen.values())) > 1:
                detail = ", ".join(f"rank {rank}: {'not finished' if v is None else f'{v} tokens'}" for rank, v in seen.items())
                out.append(f"X1/S4 at {records[0].label}: ranks decided {request_id} differently ({detail})")
    return out


def _same_requested(outcome: ScenarioOutcome) -> list[str]:
    requested = {r.rank: r.requested for r in outcome.ranks}
    if len({tuple(sorted(v.items())) for v in requested.values()}) > 1:
        return [f"ranks queued different prefetch lengths: {requested}"]
    return []


def _x4_vote_count(outcome: ScenarioOutcome, cache: int, config: TerminationConfig) -> list[str]:
    """X2/X4: per check, one vote collective per agreed id on every rank, tracked or not."""
    if not config.policy.uses_collective:
        return []
    out = []
    for r in outcome.ranks:
        steps = _steps_of(r.traces[cache])
        votes: dict[int, list[str]] = {}
        for e in r.traces[cache].events:
            if e.kind is EventKind.COLLECTIVE and e.value == VOTE_COLLECTIVE and e.step is not None:
                votes.setdefault(e.step, []).append(e.op)
        for check_record, step in zip([c for c in r.checks if c.cache == cache], steps):
            got = votes.get(step, [])
            if got != list(check_record.ids):
                out.append(f"X4 rank {r.rank} {check_record.label} (step {step}): vote collectives for {got}, agreed list {list(check_record.ids)}")
    return out


def _steps_of(trace: Trace) -> list[int]:
    return [e.step for e in trace.events if e.kind is EventKind.STEP]


def expected_commit_pages(outcome: ScenarioOutcome, request_id: str, cache: int = 0) -> int | None:
    """The spec's commit (F3, S4): MIN over ranks of what each rank could vouch for when it terminated.

    Computed from IO facts in each rank's trace (loads that ended well before
    its TERMINATE), never from the length the implementation reports. None
    when some rank never terminated the request.
    """
    pages = []
    for r in outcome.ranks:
        local = _committable_at_terminate(r.traces[cache].events, request_id, r.pools, outcome.ranks[0].configs[cache].page_size)
        if local is None:
            return None
        pages.append(local)
    return min(pages)


def _committable_at_terminate(events: Sequence[Event], op: str, pools: Mapping[str, str], page_size: int) -> int | None:
    allocs: dict[str, list[int]] = {}
    ok: dict[str, set[int]] = {}
    hit = 0
    for e in events:
        if e.op != op:
            continue
        if e.kind is EventKind.REVOKE:
            return 0
        if e.kind is EventKind.TERMINATE:
            if e.step is None:  # dropped by an abort: it joins the commit with nothing (X4)
                return UNTRACKED_COMMIT_PAGES
            kv = min(_leading_pages(allocs.get("kv", []), ok.get("kv", set()), page_size), hit)
            extras = []
            for pool, policy in pools.items():
                if pool == "kv" or pool not in allocs:
                    continue
                if HitPolicy(policy) is HitPolicy.ALL_PAGES:
                    extras.append(PoolProgress(pool, policy, _leading_pages(allocs[pool], ok.get(pool, set()), page_size)))
                else:
                    loaded = bool(allocs[pool]) and allocs[pool][0] in ok.get(pool, set())
                    extras.append(PoolProgress(pool, policy, hit if loaded else 0))
            return committable_pages(kv, extras)
        if e.kind is EventKind.ALLOC and e.pool is not None:
            allocs.setdefault(e.pool, []).extend(e.slots)
        elif e.kind is EventKind.IO_END and e.value:
            ok.setdefault(e.pool, set()).update(e.slots)
        elif e.kind is EventKind.HIT:
            hit = int(e.value)
    return None


def _leading_pages(slots: Sequence[int], ok: set[int], page_size: int) -> int:
    pages = 0
    for first in range(0, len(slots) - page_size + 1, page_size):
        if not all(s in ok for s in slots[first : first + page_size]):
            break
        pages += 1
    return pages


def _commit_oracle_problems(outcome: ScenarioOutcome, cache: int, config: TerminationConfig) -> list[str]:
    out = []
    ops = sorted({e.op for r in outcome.ranks for e in r.traces[cache].events if e.kind is EventKind.COMMIT})
    for op in ops:
        want = expected_commit_pages(outcome, op, cache)
        if want is None:
            continue
        got = outcome.commits(op, cache)
        wrong = {rank: tokens for rank, tokens in got.items() if tokens != want * config.page_size}
        if wrong:
            out.append(f"F3/S4 {op}: spec commit is {want * config.page_size} tokens (MIN over ranks of loaded pages at terminate); committed {got}")
    return out


# --- the rank process ---------------------------------------------------------------


def _rank_main(plan: Launch, rank: int) -> None:
    import torch.distributed as dist

    workdir = Path(plan.workdir)
    heartbeat = Heartbeat(workdir / f"heartbeat{rank}.txt")
    results: dict[str, Any] = {"fatal": None, "scenarios": []}
    out_path = workdir / f"results{rank}.pkl"
    status = 0
    try:
        heartbeat.phase("joining the process group")
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
        for index, scenario in enumerate(plan.scenarios):
            ctx = RankContext(plan, rank, index, scenario, device, adapter, heartbeat)
            result = ctx.run()
            results["scenarios"].append(result)
            _write_atomic(out_path, pickle.dumps(results))
            if not _agree_all_ok(store, plan, rank, index, result.error is None, heartbeat):
                break
        heartbeat.phase("waiting for every rank to finish")
        _store_barrier(store, plan, "exit", rank)
    except BaseException:
        results["fatal"] = traceback.format_exc(limit=8)
        status = 1
    finally:
        _write_atomic(out_path, pickle.dumps(results))
        heartbeat.stop()
        if dist.is_initialized():
            dist.destroy_process_group()
    sys.exit(status)


def _agree_all_ok(store, plan: Launch, rank: int, index: int, ok: bool, heartbeat: "Heartbeat") -> bool:
    """After each scenario, through the store (not a collective): go on only if every rank succeeded."""
    heartbeat.phase(f"scenario {index} done, waiting for every rank")
    store.set(f"scenario{index}/rank{rank}", b"ok" if ok else b"failed")
    keys = [f"scenario{index}/rank{r}" for r in range(plan.world_size)]
    store.wait(keys, datetime.timedelta(seconds=plan.collective_timeout_s))
    return all(store.get(k) == b"ok" for k in keys)


def _store_barrier(store, plan: Launch, name: str, rank: int) -> None:
    store.set(f"{name}/rank{rank}", b"1")
    store.wait([f"{name}/rank{r}" for r in range(plan.world_size)], datetime.timedelta(seconds=plan.collective_timeout_s))


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


class Heartbeat:
    """The rank's current step and last trace event, written to a file when they change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._phase = "starting"
        self.trace: TraceRecorder | None = None
        self._stop = threading.Event()
        self._written = ""
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name=f"heartbeat-{path.stem}", daemon=True)
        self._thread.start()

    def phase(self, text: str) -> None:
        self._phase = text
        self._write()

    def _write(self) -> None:
        trace = self.trace
        events = trace.events() if trace is not None else ()
        beat = {
            "phase": self._phase,
            "last": events[-1].describe() if events else "",
            # What this rank entered, in order: on a hang the parent finds the first divergence.
            "collectives": [_collective_name(e) for e in events if e.kind is EventKind.COLLECTIVE],
        }
        text = json.dumps(beat)
        with self._lock:
            if text != self._written:
                self._written = text
                _write_atomic(self.path, text.encode())

    def _loop(self) -> None:
        # A rank stuck inside a call records nothing new; this notes where it stopped.
        while not self._stop.wait(0.1):
            self._write()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._write()


class ObservedTrace(TraceRecorder):
    """A TraceRecorder that keeps a per-operation summary and wakes waiters on every event.

    Waiters (the scenario driver) use the summary, never the operation's lock,
    so waiting cannot deadlock with the implementation's threads.
    """

    def __init__(self, clock, *, rank: int, cond: threading.Condition) -> None:
        super().__init__(clock, rank=rank)
        self.cond = cond
        self.views: dict[str, OpView] = {}
        self._hooks: list[tuple[Callable[[Event], bool], Callable[[Event], None]]] = []

    def record(self, kind: EventKind, **fields: Any) -> Event:
        event = super().record(kind, **fields)
        hook = None
        with self.cond:
            if event.op is not None:
                self.views.setdefault(event.op, OpView()).update(event)
            for index, (predicate, callback) in enumerate(self._hooks):
                if predicate(event):
                    hook = self._hooks.pop(index)[1]
                    break
            self.cond.notify_all()
        if hook is not None:
            hook(event)  # outside every lock: it may wait for other threads
        return event

    def view(self, op: str) -> "OpView":
        return self.views.setdefault(op, OpView())

    def once(self, predicate: Callable[[Event], bool], callback: Callable[[Event], None]) -> None:
        """Run callback (once, in the recording thread) right after the first event matching predicate."""
        with self.cond:
            self._hooks.append((predicate, callback))


@dataclass
class OpView:
    hit_pages: int = 0
    hit_done: bool = False
    kv_slots_ok: int = 0
    io_done: bool = False
    terminated: bool = False

    def update(self, e: Event) -> None:
        if e.kind is EventKind.HIT:
            self.hit_pages = int(e.value)
            self.hit_done = True
        elif e.kind is EventKind.REVOKE:
            self.hit_done = self.terminated = True
        elif e.kind is EventKind.TERMINATE:
            self.terminated = True
        elif e.kind is EventKind.IO_DONE:
            self.io_done = self.hit_done = True
        elif e.kind is EventKind.IO_END and e.pool == "kv" and e.value:
            self.kv_slots_ok += len(e.slots)


class IoValve:
    """A cache's trace gate: parks each storage->host load of controlled prefetches until allowed.

    Loads are counted per operation; the n-th one passes once `allow` was
    called n times. Faults raise InjectedFault at the gate point (a failed
    transfer for the implementation). Every wait is bounded.
    """

    def __init__(self, cond: threading.Condition, rank: int, timeout_s: float) -> None:
        self._cond = cond
        self.rank = rank
        self.timeout_s = timeout_s
        self._arrived: dict[str, int] = {}
        self._allowed: dict[str, int] = {}
        self._faults: list[list[Any]] = []  # [description, predicate, remaining]
        self._open = False

    def control(self, op: str) -> None:
        with self._cond:
            self._arrived.setdefault(op, 0)
            self._allowed.setdefault(op, 0)

    def allow(self, op: str, count: int = 1) -> None:
        with self._cond:
            self._allowed[op] += count
            self._cond.notify_all()

    def parked(self, op: str) -> bool:
        """A load of op has reached the gate beyond what was allowed: its IO is started and held."""
        return self._arrived.get(op, 0) > self._allowed.get(op, 0)

    def any_parked(self) -> bool:
        return any(self.parked(op) for op in self._arrived)

    def fail(self, description: str, predicate: Callable[[Event], bool], *, times: int = 1) -> None:
        with self._cond:
            self._faults.append([description, predicate, times])

    def release(self, op: str) -> None:
        """Every later load of op passes."""
        self.allow(op, 1 << 30)

    def controlled(self) -> list[str]:
        with self._cond:
            return list(self._arrived)

    def open_all(self) -> None:
        with self._cond:
            self._open = True
            self._cond.notify_all()

    def __call__(self, event: Event) -> None:
        with self._cond:
            for fault in self._faults:
                if fault[2] and fault[1](event):
                    fault[2] -= 1
                    raise InjectedFault(f"rank {self.rank}: injected fault '{fault[0]}' at {event.describe()}")
            op = event.op
            if self._open or event.kind is not EventKind.IO_START or event.value != LOAD or op not in self._arrived:
                return
            index = self._arrived[op]
            self._arrived[op] += 1
            self._cond.notify_all()
            if not self._cond.wait_for(lambda: self._open or self._allowed[op] > index, self.timeout_s):
                raise GateTimeout(f"rank {self.rank}: load {index + 1} of {op} was never released within {self.timeout_s}s ({event.describe()})")


class ScenarioFailure(AssertionError):
    """A scenario could not drive a rank where it meant to (names the rank and what it waited for)."""


class CacheHandle:
    """One cache on one rank, with the harness's clock, trace and valve."""

    def __init__(self, ctx: "RankContext", index: int, cache, trace: ObservedTrace, clock: ManualClock, valve: IoValve, config: TerminationConfig) -> None:
        self.ctx = ctx
        self.index = index
        self.cache = cache
        self.trace = trace
        self.clock = clock
        self.valve = valve
        self.config = config
        self.aborted: set[str] = set()
        self.committed: dict[str, int] = {}
        self._steps = 0

    # --- waiting on trace facts ---

    def wait(self, predicate: Callable[[], bool], what: str) -> None:
        with self.trace.cond:
            if predicate():
                return
        self.ctx.heartbeat.phase(f"{self.ctx.scenario.label} {self.ctx.result.phase}, waiting for {what}")
        with self.trace.cond:
            if not self.trace.cond.wait_for(predicate, self.ctx.wait_timeout_s):
                raise ScenarioFailure(f"rank {self.ctx.rank}: {what} did not happen within {self.ctx.wait_timeout_s}s")

    def settle(self, op: str) -> None:
        """Wait until op's hit query ran and its IO is held at the valve, finished, or queued behind a held one."""
        view = self.trace.view(op)
        self.wait(lambda: view.hit_done and (view.io_done or self.valve.any_parked()), f"prefetch {op} settling (hit query, then first load held)")

    # --- storage ---

    def store(self, tokens: Sequence[int], data: Mapping[str, torch.Tensor]) -> None:
        """Write, back up to storage, empty device and host (the collectives are the same on every rank)."""
        self.cache.write(tokens, data)
        self.cache.flush()
        self.cache.evict_all()

    # --- prefetch driving ---

    def prefetch(self, op: str, tokens: Sequence[int]) -> int:
        self.valve.control(op)
        requested = self.cache.prefetch(op, tokens)
        self.ctx.result.requested[op] = requested
        if requested:
            self.settle(op)
        return requested

    def reached(self, op: str, level: str) -> bool:
        view = self.trace.view(op)
        kv_pages = view.kv_slots_ok // self.config.page_size
        if level == "partial":
            return 0 < kv_pages < view.hit_pages
        if level == "kv":
            return view.hit_pages > 0 and kv_pages >= view.hit_pages and (self.valve.parked(op) or view.io_done)
        if level == "done":
            return view.io_done
        raise ConfigError("level", level, " or ".join(LEVELS))

    def to(self, op: str, level: str) -> None:
        """Let op's loads through one at a time until its IO reached `level`:

        partial: some but not all KV pages loaded (the next batch held);
        kv: every KV page loaded, the extra-pool transfer held (or IO done if none);
        done: the IO thread starts nothing more for op.
        """
        view = self.trace.view(op)
        while True:
            self.wait(lambda: view.io_done or self.valve.parked(op), f"IO of {op} held at its next load (to reach level {level!r})")
            if self.reached(op, level):
                return
            if view.io_done:
                raise ScenarioFailure(f"rank {self.ctx.rank}: IO of {op} ended before reaching level {level!r} (hit {view.hit_pages} pages, {view.kv_slots_ok} KV tokens loaded)")
            self.valve.allow(op)

    def time_out(self) -> None:
        """Move this rank's clock past any timeout budget (capped or not) of a small request."""
        self.clock.advance(self.config.timeout_max_s + self.config.timeout_base_s + 1.0)

    def between_vote_and_terminate(self, op: str, level: str) -> None:
        """Window 2: at this rank's vote collective for op, move its IO to `level` before terminate runs."""

        def is_vote(e: Event) -> bool:
            return e.kind is EventKind.COLLECTIVE and e.value == VOTE_COLLECTIVE and e.op == op

        self.trace.once(is_vote, lambda _e: self.to(op, level))

    def check(self, ids: Sequence[str]) -> dict[str, int]:
        self._steps += 1
        label = f"cache {self.index} check {self._steps}"
        self.ctx.phase(f"{label} over {list(ids)}")
        finished = dict(self.cache.check_progress(list(ids)))
        self.committed.update(finished)
        self.ctx.result.checks.append(CheckRecord(self.index, label, tuple(ids), finished, frozenset(self.aborted)))
        return finished

    def abort(self, op: str) -> None:
        self.aborted.add(op)
        self.cache.abort(op)

    def release_all_io(self) -> None:
        """Every held and later load of the prefetches started so far passes."""
        for op in self.valve.controlled():
            self.valve.release(op)

    # --- results ---

    def load_and_compare(self, op: str, tokens: Sequence[int], writes: Mapping[int, Mapping[str, torch.Tensor]]) -> int:
        """Load the match of `tokens` back and compare each pool's bytes with what this rank wrote (S5).

        writes: written length -> the data written for that many tokens (rows
        of token pools, and the state at that length).
        """
        self.ctx.phase(f"loading back {op}")
        loaded = self.cache.load_back(tokens)
        error = None
        try:
            if loaded.tokens:
                _compare_loaded(self.cache, loaded, writes)
        except AssertionError as exc:
            error = str(exc)
        self.ctx.result.loads.append(LoadRecord(self.index, op, loaded.tokens, error))
        return loaded.tokens

    def close(self) -> None:
        """Let IO end, take one more (empty) scheduler step, empty the tiers, then account and close.

        The empty step is where an implementation may free what ended since
        the last one; it is a step like any other, so it must run the same
        collectives on every rank (L3).
        """
        self.ctx.phase(f"cache {self.index}: letting IO end")
        self.valve.open_all()
        for op, requested in self.ctx.result.requested.items():
            if requested and op in self.trace.views:
                view = self.trace.view(op)
                self.wait(lambda: view.io_done, f"IO of {op} ending after its valve opened")
        self.check([])
        self.ctx.phase(f"cache {self.index}: evicting everything")
        self.cache.evict_all()
        for name, (allocated, free, capacity) in self.cache.slot_accounting().items():
            if allocated:
                self.ctx.result.leaks.append(f"cache {self.index} {name}: {allocated} of {capacity} slots still allocated after every prefetch ended and evict_all() (F8)")
            if allocated + free != capacity:
                self.ctx.result.leaks.append(f"cache {self.index} {name}: allocated {allocated} + free {free} != capacity {capacity}")
        self.cache.close()
        self.ctx.result.leftover_threads += [t.name for t in self.cache.threads() if t.is_alive()]


def _compare_loaded(cache, loaded, writes: Mapping[int, Mapping[str, torch.Tensor]]) -> None:
    longest = writes[max(writes)]
    for name, pool in cache.pools.items():
        if pool.unit == "state":
            if name not in loaded.data:
                continue
            if loaded.tokens not in writes:
                raise AssertionError(f"pool {name}: a state was loaded for {loaded.tokens} tokens, but states were written only at {sorted(writes)}")
            want = writes[loaded.tokens][name]
            if not torch.equal(loaded.data[name].view(torch.uint8), want.view(torch.uint8)):
                raise AssertionError(f"pool {name}: loaded state bytes differ from the stored state at {loaded.tokens} tokens")
            continue
        got = loaded.data[name][: loaded.tokens]
        want = longest[name][: loaded.tokens]
        if not torch.equal(got.view(torch.uint8), want.view(torch.uint8)):
            rows = [i for i in range(loaded.tokens) if not torch.equal(got[i].view(torch.uint8), want[i].view(torch.uint8))]
            raise AssertionError(f"pool {name}: loaded bytes differ from stored bytes at token rows {rows[:8]}")


class RankContext:
    """What a scenario function sees on one rank."""

    def __init__(self, plan: Launch, rank: int, index: int, scenario: Scenario, device: str, adapter, heartbeat: Heartbeat) -> None:
        self.plan = plan
        self.rank = rank
        self.world_size = plan.world_size
        self.index = index
        self.scenario = scenario
        self.device = device
        self.adapter = adapter
        self.heartbeat = heartbeat
        self.wait_timeout_s = plan.wait_timeout_s
        self.result = RankScenarioResult(scenario.label, rank)
        self.handles: list[CacheHandle] = []

    def phase(self, text: str) -> None:
        self.result.phase = text
        self.heartbeat.phase(f"{self.scenario.label} {text}")

    def cache(self, policy: str, **env_fields: Any) -> CacheHandle:
        import torch.distributed as dist

        index = len(self.handles)
        termination = TerminationConfig(policy=policy, page_size=PAGE_SIZE)
        clock = ManualClock(1000.0)
        cond = threading.Condition()
        trace = ObservedTrace(clock, rank=self.rank, cond=cond)
        valve = IoValve(cond, self.rank, self.wait_timeout_s)
        trace.set_gate(valve)
        env = CacheEnv(
            device=self.device,
            termination=termination,
            storage_dir=Path(self.plan.workdir) / f"scenario{self.index}" / f"rank{self.rank}" / f"cache{index}",
            clock=clock,
            trace=trace,
            extra_pools=tuple(env_fields.pop("extra_pools", self.adapter.default_extra_pools)),
            rank=self.rank,
            world_size=self.world_size,
            process_group=dist.group.WORLD,
            batch_pages=env_fields.pop("batch_pages", BATCH_PAGES),
            wait_timeout_s=self.wait_timeout_s,
            **env_fields,
        )
        self.phase(f"creating cache {index}")
        session = self.adapter.create(env)
        handle = CacheHandle(self, index, session, trace, clock, valve, termination)
        self.handles.append(handle)
        self.heartbeat.trace = trace
        self.result.traces.append(trace.trace())  # placeholder, replaced at the end
        self.result.configs.append(termination)
        self.result.pools = {name: HitPolicy(pool.hit_policy).value for name, pool in session.pools.items()}
        return handle

    def run(self) -> RankScenarioResult:
        function = SCENARIOS[self.scenario.name]
        try:
            function(self, **self.scenario.params)
            self.phase("closing")
            for handle in self.handles:
                handle.close()
        except BaseException:
            self.result.error = traceback.format_exc(limit=6)
            for handle in self.handles:
                handle.valve.open_all()  # parked IO threads must not outlive the scenario
                try:
                    handle.cache.close()
                except BaseException as exc:
                    self.result.error += f"\n(close also failed: {exc})"
        self.result.traces = [h.trace.trace() for h in self.handles]
        return self.result  # the heartbeat keeps this trace until the next cache: a peer may still hang on it


# --- data ----------------------------------------------------------------------------


def request_tokens(seed: int, pages: int = REQUEST_PAGES) -> list[int]:
    import random

    rng = random.Random(seed)
    return [rng.randrange(1, 50_000) for _ in range(pages * PAGE_SIZE)]


def rank_data(handle: CacheHandle, length: int, seed: int, *, prefix: Mapping[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """Random bytes for every pool; each rank holds its own shard (different bytes per rank).

    prefix: data of a shorter request this one extends (its token rows are reused).
    """
    g = torch.Generator().manual_seed(seed * 1009 + handle.ctx.rank)
    data = {}
    for name, pool in handle.cache.pools.items():
        rows = 1 if pool.unit == "state" else length
        raw = torch.randint(0, 256, (rows, *pool.elem_shape, pool.dtype.itemsize), dtype=torch.uint8, generator=g)
        tensor = raw.view(pool.dtype).reshape(rows, *pool.elem_shape)
        if prefix is not None and pool.unit != "state":
            tensor[: prefix[name].shape[0]] = prefix[name]
        data[name] = tensor
    return data


# --- scenarios (run on every rank; `ctx.rank` makes them rank-skewed) -----------------


def _finish(h: CacheHandle, requests: Mapping[str, tuple[Sequence[int], Mapping[int, Mapping[str, torch.Tensor]]]]) -> None:
    """Let every held IO go, then load back each finished request and compare bytes; match each aborted one."""
    h.ctx.phase("releasing IO")
    h.release_all_io()
    for op, (tokens, writes) in requests.items():
        if op in h.committed:
            h.load_and_compare(op, tokens, writes)
        h.ctx.result.matches[op] = tuple(h.cache.match(tokens))


def staggered_level(rank: int, step: int) -> str:
    """Rank r's IO reaches 'done' at step r + 1 (rank 0 fast, the last rank slowest)."""
    if step > rank:
        return "done"
    return "kv" if step == rank else "partial"


def scenario_skewed_kv(ctx: RankContext, policy: str) -> None:
    """Each rank's KV batches arrive at a different step: all ranks finish together, at the slowest."""
    h = ctx.cache(policy)
    tokens = request_tokens(1)
    data = rank_data(h, len(tokens), 1)
    ctx.phase("storing")
    h.store(tokens, data)
    h.prefetch("r1", tokens)
    # The number of checks is fixed by the scenario, never by a rank-local result.
    for step in range(1, ctx.world_size + 1):
        ctx.phase(f"step {step}: IO to {staggered_level(ctx.rank, step)}")
        h.to("r1", staggered_level(ctx.rank, step))
        h.check(["r1"])
    _finish(h, {"r1": (tokens, {len(tokens): data})})


def scenario_one_rank_timed_out(ctx: RankContext) -> None:
    """timeout: rank 0 is never past its deadline, the others are.

    Step 1: every rank's KV partial: rank 0 votes no, so nobody terminates.
    Step 2: rank 0 done (votes yes, completed), the others still partial and
    timed out: everyone terminates; the commit is the MIN over ranks.
    """
    h = ctx.cache("timeout")
    tokens = request_tokens(2)
    data = rank_data(h, len(tokens), 2)
    h.store(tokens, data)
    h.prefetch("r1", tokens)
    if ctx.rank != 0:
        h.time_out()
    h.to("r1", "partial")
    h.check(["r1"])
    if ctx.rank == 0:
        h.to("r1", "done")
    h.check(["r1"])
    _finish(h, {"r1": (tokens, {len(tokens): data})})


def scenario_extra_pool_pending_on_one_rank(ctx: RankContext, policy: str) -> None:
    """The last rank's KV is complete but its extra-pool transfer is pending; the others are done.

    wait_complete: the pending rank votes no (D3, before the reduce: X3), so
    nobody terminates until its extra pool ends. timeout (everyone timed out):
    everyone terminates at once, and the fence clamps the commit (F3, F4).
    """
    h = ctx.cache(policy)
    tokens = request_tokens(3)
    data = rank_data(h, len(tokens), 3)
    h.store(tokens, data)
    h.prefetch("r1", tokens)
    slow = ctx.rank == ctx.world_size - 1
    if policy == "timeout":
        h.time_out()
    h.to("r1", "kv" if slow else "done")
    ctx.result.notes["pending_extra"] = slow and not h.trace.view("r1").io_done
    h.check(["r1"])
    if policy == "wait_complete":
        h.to("r1", "done")
        h.check(["r1"])
    _finish(h, {"r1": (tokens, {len(tokens): data})})


def scenario_abort_on_one_rank(ctx: RankContext, aborting_rank: int, peers_level: str) -> None:
    """One rank aborts r1 (release) while the others track it: the agreed list still names r1.

    The aborting rank joins r1's collectives neutrally (X4: [0, 1] then 0
    pages), so the others terminate it at that step and commit 0 (S4); r2,
    checked in the same steps, is untouched and commits in full once loaded.
    """
    h = ctx.cache("wait_complete")
    t1, t2 = request_tokens(4), request_tokens(5)
    d1, d2 = rank_data(h, len(t1), 4), rank_data(h, len(t2), 5)
    h.store(t1, d1)
    h.store(t2, d2)
    h.prefetch("r1", t1)
    h.prefetch("r2", t2)
    if ctx.rank == aborting_rank:
        h.abort("r1")
    else:
        h.to("r1", peers_level)
    h.check(["r1", "r2"])
    h.valve.release("r1")  # whatever r1 still holds goes: those loads end and free their slots
    h.wait(lambda: h.trace.view("r1").io_done, "IO of the dropped r1 ending")
    h.settle("r2")
    h.to("r2", "done")
    h.check(["r2"])
    _finish(h, {"r1": (t1, {len(t1): d1}), "r2": (t2, {len(t2): d2})})


def scenario_storage_miss_on_one_rank(ctx: RankContext, missing_rank: int) -> None:
    """missing_rank's storage lacks the last two pages (their backup failed there): the hit is the MIN.

    Every rank writes A (2 pages) and B = A + 2 pages; on missing_rank the
    backup of B's tail fails. The hit query agrees on 2 pages (hit MIN) and
    every rank commits 2 pages, with A's bytes and A's state.
    """
    h = ctx.cache("wait_complete")
    tb = request_tokens(6)
    ta = tb[: len(tb) // 2]
    da = rank_data(h, len(ta), 6)
    db = rank_data(h, len(tb), 7, prefix=da)
    h.store(ta, da)
    if ctx.rank == missing_rank:
        h.valve.fail("backup of B's tail", lambda e: e.kind is EventKind.IO_START and e.value == BACKUP)
    h.store(tb, db)
    h.prefetch("r1", tb)
    h.to("r1", "done")
    h.check(["r1"])
    _finish(h, {"r1": (tb, {len(ta): da, len(tb): db})})


def scenario_get_fails_on_one_rank(ctx: RankContext, failing_rank: int) -> None:
    """failing_rank's second KV batch fails in storage (it trims its hit): the commit is the MIN."""
    h = ctx.cache("wait_complete")
    tokens = request_tokens(8)
    data = rank_data(h, len(tokens), 8)
    h.store(tokens, data)
    if ctx.rank == failing_rank:
        seen: list[int] = []

        def second_kv_load(e: Event) -> bool:
            if e.kind is EventKind.IO_START and e.value == LOAD and e.pool == "kv" and e.op == "r1":
                seen.append(e.io)
            return len(seen) == 2 and e.io == seen[1]

        h.valve.fail("second KV batch of r1", second_kv_load)
    h.prefetch("r1", tokens)
    h.to("r1", "done")
    h.check(["r1"])
    _finish(h, {"r1": (tokens, {len(tokens): data})})


ORDER_PAIRS = [(vote, term) for vote, term in itertools.product(LEVELS, LEVELS) if LEVELS.index(term) >= LEVELS.index(vote)]


def order_cases(policy: str, world_size: int) -> list[tuple[tuple[str, str], ...]]:
    """Every per-rank combination of (IO level at the vote, IO level at terminate).

    timeout (every rank timed out): IO may move between a rank's vote and its
    terminate (window 2). wait_complete and best_effort: nothing moves in between.
    """
    pairs = ORDER_PAIRS if policy == "timeout" else [(level, level) for level in LEVELS]
    return list(itertools.product(pairs, repeat=world_size))


def scenario_orders(ctx: RankContext, policy: str, cases: Sequence[tuple[tuple[str, str], ...]]) -> None:
    """Systematic cross-rank orders: one prefetch per case, in one cache, the same stored request.

    Each rank's IO is at case[rank][0] when it votes and at case[rank][1] when
    it terminates. The commit must match the spec's MIN over ranks (checked by
    the parent from IO facts), and the loaded bytes the stored ones.
    """
    h = ctx.cache(policy)
    tokens = request_tokens(9)
    data = rank_data(h, len(tokens), 9)
    h.store(tokens, data)
    outcomes = []
    for index, case in enumerate(cases):
        # The id says, per rank, where its IO was at the vote and at terminate.
        op = f"o{index}:" + ",".join(f"r{rank}={vote}>{term}" for rank, (vote, term) in enumerate(case))
        vote_level, terminate_level = case[ctx.rank]
        ctx.phase(f"case {index} {case}")
        h.prefetch(op, tokens)
        if policy == "timeout":
            h.time_out()
        h.to(op, vote_level)
        if terminate_level != vote_level:
            h.between_vote_and_terminate(op, terminate_level)
        finished = h.check([op])
        if policy == "wait_complete" and any(c[0] != "done" for c in case):
            h.to(op, "done")  # a second check, on every rank (the case is known to all)
            finished = h.check([op])
        h.release_all_io()
        h.wait(lambda: h.trace.view(op).io_done, f"IO of {op} ending")
        if finished.get(op):
            h.load_and_compare(op, tokens, {len(tokens): data})
        outcomes.append((case, finished.get(op)))
        h.cache.evict_all()
    ctx.result.notes["orders"] = outcomes


def scenario_skip_collective(ctx: RankContext, hung_rank: int) -> None:
    """Harness self-test, no cache: only hung_rank enters a collective, so it hangs there."""
    import torch.distributed as dist

    trace = TraceRecorder(ManualClock(0.0), rank=ctx.rank)
    ctx.heartbeat.trace = trace
    ctx.phase("all_reduce on one rank only")
    if ctx.rank == hung_rank:
        trace.record(EventKind.COLLECTIVE, value="vote_max", op="r1", step=1)
        dist.all_reduce(torch.zeros(2, dtype=torch.int64))


def scenario_raise_on_rank(ctx: RankContext, failing_rank: int) -> None:
    """Harness self-test, no cache: one rank's scenario raises."""
    ctx.phase("about to fail")
    if ctx.rank == failing_rank:
        raise RuntimeError("deliberate failure")


SCENARIOS: dict[str, Callable[..., None]] = {
    "skewed_kv": scenario_skewed_kv,
    "one_rank_timed_out": scenario_one_rank_timed_out,
    "extra_pool_pending_on_one_rank": scenario_extra_pool_pending_on_one_rank,
    "abort_on_one_rank": scenario_abort_on_one_rank,
    "storage_miss_on_one_rank": scenario_storage_miss_on_one_rank,
    "get_fails_on_one_rank": scenario_get_fails_on_one_rank,
    "orders": scenario_orders,
    "skip_collective": scenario_skip_collective,
    "raise_on_rank": scenario_raise_on_rank,
}
