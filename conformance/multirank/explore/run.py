"""The parent's side of a cross-rank exploration: one launch of ranks, its summary, a failure named and replayable.

    result = explore(adapter, SCENARIOS["abort/wait_complete"], workdir=tmp, source=["--cache-impl", "caches.adapters:hiradix"])
    replay(adapter, SCENARIOS["abort/wait_complete"], "abort1,check", workdir=tmp)

A failure raises CrossRankExplorationError: for each failing schedule found
(one per new clause, a few at most) the oracle's lines, each naming its
clause, the schedule, how many passed before it, and the command that
replays that schedule alone (`python -m conformance.multirank.explore`).
"""

from __future__ import annotations

import json
import os
import pickle
import shlex
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from conformance.bounds import LAUNCH_S
from conformance.errors import ConformanceFailure
from conformance.multirank.checks import scenario_problems
from conformance.multirank.explore import entry
from conformance.multirank.explore.model import CURRENT_FILE, EXPLORE_SCENARIO, FAILURES_FILE, SUMMARY_NOTE, CrossRankScenario
from conformance.multirank.explore.search import Failure, Summary
from conformance.multirank.launch import MultiRankError, launch
from conformance.multirank.records import AdapterRef, Scenario, adapter_ref
from conformance.scenarios.explore import ReplayError



MEMORY_FS = "/dev/shm"
MEMORY_NEEDED = 512 << 20  # bytes free there before the ranks' files go there


class CrossRankExplorationError(ConformanceFailure):
    """A schedule failed; the message carries the clauses, the schedule and how to replay it."""

    def __init__(self, message: str, *, scenario: CrossRankScenario, schedule: str, explored: int) -> None:
        super().__init__(message)
        self.scenario = scenario
        self.schedule = schedule
        self.explored = explored  # schedules that passed before the first failure
        self.first_after_s: float | None = None  # seconds from the exploration's start to the first failure


class CrossRankReplayError(ReplayError):
    """A replayed schedule named an action the implementation no longer enables there."""


@dataclass(frozen=True)
class CrossRankExploration:
    """What one exploration did: schedules run, the schedules a partial-order reduction alone would run, every interleaving."""

    scenario: CrossRankScenario
    explored: int
    classes: int
    naive: int
    elapsed_s: float
    setups: int

    @property
    def per_second(self) -> float:
        return self.explored / self.elapsed_s if self.elapsed_s else 0.0

    @property
    def ratio(self) -> float:
        """Naive schedules per schedule explored."""
        return self.naive / self.explored if self.explored else 0.0


def replay_command(source: Sequence[str], scenario: CrossRankScenario, schedule: str) -> str:
    """The command that replays one schedule alone; source: the options that build the implementation."""
    return shlex.join(["python", "-m", "conformance.multirank.explore", *source, "--scenario", scenario.name, "--schedule", schedule])


def explore(adapter: Any, scenario: CrossRankScenario, *, workdir: Path, device: str = "cpu", source: Sequence[str] = (),
            only: str | None = None, cli_specs: Sequence[str] = (), total_timeout_s: float = LAUNCH_S,
            hang_timeout_s: float | None = None) -> CrossRankExploration:
    """Every schedule of `scenario` on real ranks (or the schedule `only`); CrossRankExplorationError names the ones that failed.

    workdir: where the ranks keep their files, unless the machine has room in memory for them (_scratch).
    """
    __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
    ref = adapter if isinstance(adapter, AdapterRef) else adapter_ref(adapter, cli_specs)
    preload = [entry.MODULE, *([type(adapter).__module__] if not isinstance(adapter, AdapterRef) else []),
               *getattr(adapter, "preload_modules", ())]
    with _scratch(Path(workdir)) as where:
        return _explore(ref, preload, scenario, where, device, source, only, total_timeout_s, hang_timeout_s)


@contextmanager
def _scratch(workdir: Path) -> Iterator[Path]:
    """Where the ranks keep their files: a folder in memory where the machine has room there, else `workdir`.

    Every scheduler step writes a heartbeat file and every schedule storage
    pages; on a slow disk those writes were a third of a schedule's time.
    """
    memory = Path(MEMORY_FS)
    if memory.is_dir() and os.access(memory, os.W_OK) and shutil.disk_usage(memory).free > MEMORY_NEEDED:
        folder = Path(tempfile.mkdtemp(prefix="crossrank-", dir=memory))
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    else:
        workdir.mkdir(parents=True, exist_ok=True)
        yield workdir


def _explore(ref: AdapterRef, preload: Sequence[str], scenario: CrossRankScenario, workdir: Path, device: str, source: Sequence[str],
             only: str | None, total_timeout_s: float, hang_timeout_s: float | None) -> CrossRankExploration:
    __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
    (workdir / CURRENT_FILE).unlink(missing_ok=True)
    (workdir / FAILURES_FILE).unlink(missing_ok=True)
    launched = Scenario(EXPLORE_SCENARIO, {"scenario": scenario.as_fields(), "only": only})
    extra = {"hang_timeout_s": hang_timeout_s} if hang_timeout_s is not None else {}
    try:
        result = launch(ref, [launched], world_size=scenario.world_size, device=device, workdir=workdir, preload=preload,
                        total_timeout_s=total_timeout_s, **extra)
    except MultiRankError as exc:
        # The ranks were stopped: the failures found before, then the schedule that was running.
        same = _inside_one_collective(workdir, scenario.world_size)
        hung = Failure(_current(workdir), (str(exc), *([same] if same and "L3: " not in str(exc) else [])), -1, 0.0)
        raise _failure([*_found(workdir), hung], scenario, source) from None
    outcome = result.outcomes[0] if result.outcomes else None
    summary: Summary | None = outcome.ranks[0].notes.get(SUMMARY_NOTE) if outcome is not None else None
    if summary is None:
        problems = scenario_problems(outcome) if outcome is not None else result.fatal
        lost = Failure(_current(workdir), tuple(problems) or ("the exploration ended without a summary",), -1, 0.0)
        raise _failure([*_found(workdir), lost], scenario, source)
    if summary.failures:
        if only is not None and any(f"{ReplayError.__name__}: " in p for p in summary.failures[0].problems):
            raise CrossRankReplayError("\n".join(summary.failures[0].problems))
        raise _failure(summary.failures, scenario, source)
    return CrossRankExploration(scenario, summary.explored, summary.classes, summary.naive, summary.elapsed_s, summary.setups)


def _inside_one_collective(workdir: Path, world_size: int) -> str | None:
    """L3, when every rank entered the same collectives, the last one the same on each, and none returned from it.

    The names agree, so the hang report names no divergence; what differs is
    the payload (its length or type depends on state one rank has alone),
    and the group cannot complete that reduce.
    """
    beats = []
    for rank in range(world_size):
        try:
            beats.append(json.loads((workdir / f"heartbeat{rank}.txt").read_text()))
        except (OSError, ValueError):
            return None
    taken = {tuple(b.get("collectives") or ()) for b in beats}
    if len(taken) != 1 or not next(iter(taken)) or not all(" collective " in (b.get("last") or "") for b in beats):
        return None
    last = next(iter(taken))[-1]
    return (f"L3: every rank entered {last} and none returned from it: the ranks' payloads of that collective differ "
            f"(their length or kind depends on rank-local state)")


def _current(workdir: Path) -> str:
    return (workdir / CURRENT_FILE).read_text() if (workdir / CURRENT_FILE).exists() else ""


def _found(workdir: Path) -> list[Failure]:
    path = workdir / FAILURES_FILE
    return pickle.loads(path.read_bytes()) if path.exists() else []


def replay(adapter: Any, scenario: CrossRankScenario, schedule: str, *, workdir: Path, **kwargs: Any) -> CrossRankExploration:
    """One schedule alone: its actions exactly, then the finish; raises as explore() does."""
    __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
    return explore(adapter, scenario, workdir=workdir, only=schedule, **kwargs)


def _failure(failures: Sequence[Failure], scenario: CrossRankScenario, source: Sequence[str]) -> CrossRankExplorationError:
    """Every failure found: its lines, its schedule, the command replaying it; the first is the error's schedule."""
    lines = []
    for failure in failures:
        after = f" (after {failure.passed_before} schedules passed)" if failure.passed_before >= 0 else ""
        where = (f"cross-rank scenario {scenario.name}: schedule '{failure.schedule}' failed{after}" if failure.schedule
                 else f"cross-rank scenario {scenario.name}: the launch failed before its first schedule")
        lines += [*failure.problems, where]
        if failure.schedule and source:
            lines.append(f"replay: {replay_command(source, scenario, failure.schedule)}")
    first = failures[0]
    error = CrossRankExplorationError("\n".join(lines), scenario=scenario, schedule=first.schedule, explored=max(first.passed_before, 0))
    error.first_after_s = first.after_s
    return error
