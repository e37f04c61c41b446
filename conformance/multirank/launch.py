"""The parent side of a multi-rank run: what travels to and from the ranks, launch and supervision.

The parent (a pytest worker) hosts a TCP store on 127.0.0.1 at a port the OS
picks at run time, starts world_size processes and waits for them within a
bound; each rank writes its traces and observations to a file read here.

Processes, the store and their teardown order come from processes.py (a
forkserver that imports torch once, every rank forked from it: as safe as
spawn, CUDA included, and a launch costs about 0.1 s instead of seconds).

Hangs: every rank runs a heartbeat thread that writes its current scenario
step and last trace event to a small file. When no live rank's heartbeat
changed for hang_timeout_s, the parent kills every rank and reports
"rank R hung at step S (last event ...)". Collectives also carry a timeout
(init_process_group(timeout=...)) as a backstop.
"""

from __future__ import annotations

import json
import multiprocessing.connection
import os
import pickle
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Collection, Mapping, Sequence

import torch

from conformance.errors import ConformanceError, ConformanceFailure
from conformance.bounds import COLLECTIVE_S, HANG_S, LAUNCH_S, STARTUP_S, WAIT_S
from conformance.multirank.checks import once_per_error, same_usable_prefix_problems, scenario_problems
from conformance.multirank.records import (
    ON_GROUP, WAITING, AdapterRef, Launch, Scenario, ScenarioOutcome,
)
from conformance.multirank.decisions import DecisionDeviation
from conformance.multirank.processes import RankProcesses
from spec.errors import ConfigError
from spec.groups import group_members



@dataclass
class LaunchResult:
    outcomes: list[ScenarioOutcome]
    fatal: list[str]
    wall_s: float


class MultiRankError(ConformanceFailure):
    """A multi-rank launch failed: a rank hung, crashed or could not start."""


class TriggerNotProduced(ConformanceError):
    """A scenario's planted fault never fired on this implementation: what it judged, it judged without its trigger."""


# --- the parent ---------------------------------------------------------------------

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
    hang_timeout_s: float = HANG_S,
    collective_timeout_s: float = COLLECTIVE_S,
    wait_timeout_s: float = WAIT_S,
    total_timeout_s: float = LAUNCH_S,
    startup_timeout_s: float = STARTUP_S,
    preload: Sequence[str] = (),
) -> LaunchResult:
    """Run `scenarios` on `world_size` rank processes; raise MultiRankError on a hang or crash.

    A scenario that fails on some rank is not raised here: its outcome carries
    the rank's error (see scenario_problems), and the ranks skip the rest.
    """
    __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
    # The rank side imports this module: imported here, so that the import graph has no cycle.
    from conformance.multirank.rank import rank_main  # the rank side, imported only where ranks start

    if device not in ("cpu", "cuda"):
        raise ConfigError("device", device, "'cpu' or 'cuda' (each rank uses cuda:<rank>)")
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 2:
        raise ConfigError("world_size", world_size, "an integer >= 2")
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    # The parent hosts the store and releases it only once every rank exited (processes.py).
    with RankProcesses(world_size, store_timeout_s=collective_timeout_s, preload=preload) as ranks:
        plan = Launch(adapter, world_size, device, tuple(scenarios), str(workdir), ranks.port, collective_timeout_s, wait_timeout_s)
        procs = ranks.start(rank_main, lambda rank: (plan, rank))
        hang = _supervise(procs, workdir, hang_timeout_s, total_timeout_s, startup_timeout_s)
    results = [_read_results(workdir, rank) for rank in range(world_size)]
    fatal = [f"rank {rank}: {res['fatal']}" for rank, res in enumerate(results) if res["fatal"]]
    crashed = [f"rank {rank} exited with code {p.exitcode}" for rank, p in enumerate(procs) if p.exitcode not in (0, None) and not results[rank]["fatal"]]
    if hang:
        errors = once_per_error((r.rank, f"{r.scenario} at {r.phase}: {r.error}") for res in results for r in res["scenarios"] if r.error)
        deviations = [e for e in errors if f": {DecisionDeviation.__name__}: " in e]
        if deviations:
            # A peer then waits for what the deviating rank never does: the hang is a consequence, not a finding.
            consequence = hang.replace("\nL3: ", "\n")
            raise MultiRankError("\n".join([*deviations, f"(as a consequence the ranks then stopped: {consequence})", *fatal]))
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

    A rank counts as quiet once its heartbeat has not changed for
    hang_timeout_s; before its first heartbeat (process start, imports) and
    while its heartbeat names a setup step (joining the group, building a
    cache), the bound is startup_timeout_s. The run is stalled when every
    live rank is quiet.
    """
    start = time.monotonic()
    beats: dict[int, str] = {}
    changed: dict[int, float] = {rank: start for rank in range(len(procs))}
    bound: dict[int, float] = {rank: startup_timeout_s for rank in range(len(procs))}  # set again at each new heartbeat
    while True:
        alive = [rank for rank, p in enumerate(procs) if p.exitcode is None]
        if not alive:
            return None
        multiprocessing.connection.wait([procs[r].sentinel for r in alive], timeout=0.2)
        now = time.monotonic()
        for rank in alive:
            beat = _read_heartbeat(workdir, rank)
            # No file yet is no heartbeat: the rank is still starting, under the startup bound.
            if beat and beat != beats.get(rank):
                beats[rank] = beat
                changed[rank] = now
                bound[rank] = startup_timeout_s if _parse_beat(beat).get("setup") else hang_timeout_s
        alive = [rank for rank, p in enumerate(procs) if p.exitcode is None]
        quiet = min((now - changed[r] for r in alive), default=0.0)
        stalled = bool(alive) and all(now - changed[r] >= bound[r] for r in alive)
        if alive and not stalled and quiet >= min(1.0, hang_timeout_s):
            # Ranks that entered different collectives at the same position can never
            # make progress together: no need to wait out the whole bound.
            stalled = _entered_different_collectives({r: _parse_beat(beats.get(r, ""))["collectives"] for r in alive})
        if stalled or (alive and now - start >= total_timeout_s):
            why = f"no progress for {quiet:.1f}s" if stalled else f"still running after {total_timeout_s:g}s"
            final = {rank: _read_heartbeat(workdir, rank) or beats.get(rank, "") for rank in range(len(procs))}  # an exited rank's last word
            parsed = {rank: _parse_beat(beat) for rank, beat in final.items()}
            lines = []
            for rank in alive:
                beat = parsed[rank]
                lines.append(f"rank {rank} hung at step '{beat['phase']}' (last event: {beat['last'] or 'none'})")
            done = [rank for rank in range(len(procs)) if rank not in alive]
            tail = f"; ranks {done} had exited" if done else ""
            held = {r for r in alive if WAITING in parsed[r]["phase"]}
            # A rank that exited takes no collective again: a peer inside one it never took diverged (L3), not merely hung.
            taken = {r: b["collectives"] for r, b in parsed.items() if r in alive or final[r]}
            divergence = first_divergence(taken, behind=held)
            tail += f"\n{divergence}" if divergence else ""
            stuck = f"multi-rank run stuck ({why}): " + "; ".join(lines) + tail
            # A background thread that died explains a rank that waits for its IO forever: the cause leads.
            deaths = list(dict.fromkeys(f"rank {r} {d}" for r in alive for d in parsed[r].get("deaths", [])))
            return "; ".join(deaths) + f"\n(then: {stuck})" if deaths else stuck


def _read_heartbeat(workdir: Path, rank: int) -> str:
    try:
        return (workdir / f"heartbeat{rank}.txt").read_text()
    except OSError:
        return ""


def _parse_beat(text: str) -> dict[str, Any]:
    try:
        return json.loads(text)
    except ValueError:
        return {"phase": "starting", "setup": True, "last": "", "collectives": []}


def _per_group(per_rank: Mapping[int, Sequence[str]]) -> dict[str | None, dict[int, list[str]]]:
    """Each group's collective sequence on each of its member ranks (None: the one group, every rank)."""
    groups: dict[str | None, dict[int, list[str]]] = {}
    for rank, seq in per_rank.items():
        for name in seq:
            label = name.rpartition(ON_GROUP)[2] if ON_GROUP in name else None
            groups.setdefault(label, {})
    for label, by_rank in groups.items():
        members = group_members(label)
        for rank, seq in per_rank.items():
            if members is None or rank in members:
                by_rank[rank] = [n for n in seq if (n.rpartition(ON_GROUP)[2] if ON_GROUP in n else None) == label]
    return groups


def _entered_different_collectives(per_rank: Mapping[int, Sequence[str]]) -> bool:
    for by_rank in _per_group(per_rank).values():
        shortest = min((len(seq) for seq in by_rank.values()), default=0)
        if len(by_rank) > 1 and any(len({seq[i] for seq in by_rank.values()}) > 1 for i in range(shortest)):
            return True
    return False


def first_divergence(per_rank: Mapping[int, Sequence[str]], *, behind: Collection[int] = ()) -> str | None:
    """The first position where the ranks' collective sequences differ (L3), on each group, described.

    Collectives naming a group are compared among that group's ranks only.
    behind: ranks the harness itself holds (a bounded wait of the scenario):
    that they have not entered a collective yet is no divergence.
    """
    for label, by_rank in sorted(_per_group(per_rank).items(), key=lambda item: str(item[0])):
        if len(by_rank) < 2:
            continue
        longest = max(len(seq) for seq in by_rank.values())
        for index in range(longest):
            names = {rank: (seq[index] if index < len(seq) else "nothing") for rank, seq in by_rank.items()
                     if index < len(seq) or rank not in behind}
            if len(set(names.values())) > 1:
                detail = ", ".join(f"rank {rank} {name}" for rank, name in sorted(names.items()))
                where = f" on group {label}" if label is not None else ""
                return f"L3: collective #{index + 1}{where} differs across ranks: {detail}"
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
    A scenario whose planted fault never fired on some rank (the implementation
    moves its IO in other units than the scenario counts) raises
    TriggerNotProduced instead: nothing it saw is a verdict.
    """
    __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
    result = launch(adapter, scenarios, **kwargs)
    unfired = [f"{outcome.scenario.label}: rank {r.rank}: {fault}" for outcome in result.outcomes for r in outcome.ranks
               for fault in r.unfired_faults]
    if unfired:
        raise TriggerNotProduced("; ".join(unfired))
    problems = []
    for outcome in result.outcomes:
        found = scenario_problems(outcome)
        if same_usable_prefix:
            found += same_usable_prefix_problems(outcome)
        problems += [f"{outcome.scenario.label}: {p}" for p in found]
    missing = [s.label for s in scenarios if s not in [o.scenario for o in result.outcomes]]
    if missing:
        problems.append(f"scenarios not run on every rank (an earlier one failed): {missing}")
    if problems:
        raise MultiRankError("\n".join(problems))
    return result.outcomes
