"""The exploration on the ranks of one launch: rank 0 searches and judges, every rank runs each schedule.

The ranks live for the whole exploration (one process group, one launch);
each schedule runs on fresh caches in a RankContext of its own, so its trace,
its checks and its decisions are those of that schedule alone. After each
schedule every rank hands its result to rank 0 through the store; rank 0
judges it with the multi-rank oracle (conformance/multirank/checks.py: the
spec's invariants across ranks, the decisions, the commit, the bytes, the
accounting, the same usable prefix) and posts the verdict and the next
schedule. After a failing schedule the search goes on from where that run
stopped, for failures naming other clauses (up to MAX_FAILURES); a hang
ends it (the launch is stopped), and the failures found before it are read
from the launch's folder.
"""

from __future__ import annotations

import pickle
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

from conformance.multirank.checks import same_usable_prefix_problems, scenario_problems
from conformance.multirank.decisions import DecisionExchange
from conformance.multirank.driver import RankContext
from conformance.multirank.explore.model import CURRENT_FILE, FAILURES_FILE, SCHEDULE_SCENARIO, SUMMARY_NOTE, CrossRankScenario
from conformance.multirank.explore.schedule import SCHEDULE_NOTE, STEPS_NOTE, PeerFailed, StoreSync
from conformance.multirank.explore.search import Failure, RunLog, Search, Summary, Task
from conformance.multirank.heartbeat import write_atomic
from conformance.multirank.records import RankScenarioResult, Scenario, ScenarioOutcome
from conformance.multirank.scenarios import GROUP_LAYOUTS
from conformance.report.failures import named_clauses

MAX_FAILURES = 4  # failures naming new clauses before the exploration stops



@dataclass(frozen=True)
class Verdict:
    problems: tuple[str, ...]
    summary: Summary
    next_task: Task | None


def explore_on_ranks(ctx: RankContext, scenario: Mapping[str, Any], only: str | None = None) -> None:
    """Every schedule of `scenario` (or the one schedule `only`), judged one by one; the summary goes to the result notes."""
    s = CrossRankScenario.from_fields(scenario)
    store = ctx.exchange.store
    sync = StoreSync(store, ctx.rank, ctx.world_size, ctx.plan.collective_timeout_s, f"explore{ctx.index}")
    search = Search(s, s.pools_for(ctx.adapter), only=only) if ctx.rank == 0 else None
    started = time.perf_counter()
    if search is not None:
        sync.post("task", search.first())
    summary = Summary(s.name)
    stored: set[str] = set()  # the storage kinds written so far (schedule.py)
    while True:
        task: Task | None = sync.fetch("task")
        if task is None:
            break
        if search is not None:
            (Path(ctx.plan.workdir) / CURRENT_FILE).write_text(task.text)
        result = _run_schedule(ctx, s, task, sync, stored)
        if search is None:
            store.set(sync.key("result", ctx.rank), _dumps(result))
            verdict: Verdict = sync.fetch("verdict")
        else:
            verdict = _judge(ctx, s, search, task, result, sync, started)
            sync.post("verdict", verdict)
            sync.run += 1
            sync.post("task", verdict.next_task)
        if search is None:
            sync.run += 1
        summary = verdict.summary
        if verdict.next_task is None:
            break
    ctx.result.notes[SUMMARY_NOTE] = summary


def _index(ctx: RankContext, task: Task) -> int:
    """The schedule's own RankContext index: its storage folder and its decisions' keys are its own."""
    return (ctx.index + 1) * 1_000_000 + task.index


def _run_schedule(ctx: RankContext, s: CrossRankScenario, task: Task, sync: StoreSync, stored: set[str]) -> RankScenarioResult:
    index = _index(ctx, task)
    exchange = DecisionExchange(ctx.exchange.store, ctx.rank, ctx.world_size, index, ctx.plan.collective_timeout_s)
    inner = RankContext(ctx.plan, ctx.rank, index, Scenario(SCHEDULE_SCENARIO, {"scenario": s.name, "schedule": task.text}), ctx.device,
                        ctx.adapter, ctx.heartbeat, exchange, ctx.save_partial)
    if s.layout is not None:
        inner.process_groups = GROUP_LAYOUTS[s.layout]
    inner.exploration = (s, task, sync, stored)  # what the schedule's function runs (entry.py)
    # This schedule's collectives are compared from its own start; the last one's stay in the heartbeat until then,
    # for a peer that hangs in a collective this rank skipped before it finished.
    ctx.heartbeat.trace = None
    result = inner.run()
    if result.error and not _peer_failed(result):
        sync.failed()
    return result


def _record(ctx: RankContext, search: Search, failure: Failure) -> None:
    """A failure naming a clause not named yet is kept, and written where the parent finds it should the ranks hang later."""
    seen = {clause for earlier in search.failures for clause in named_clauses("\n".join(earlier.problems))}
    named = set(named_clauses("\n".join(failure.problems)))
    if search.failures and named and named <= seen:
        return
    search.failures.append(failure)
    write_atomic(Path(ctx.plan.workdir) / FAILURES_FILE, pickle.dumps(search.failures))


def _peer_failed(result: RankScenarioResult) -> bool:
    return bool(result.error) and f"{PeerFailed.__name__}: " in result.error


def _dumps(value: Any) -> bytes:
    return pickle.dumps(value)


def _judge(ctx: RankContext, s: CrossRankScenario, search: Search, task: Task, mine: RankScenarioResult, sync: StoreSync,
           started: float) -> Verdict:
    """Rank 0: every rank's result of this schedule, judged; the verdict and the next task."""
    keys = [sync.key("result", r) for r in range(1, ctx.world_size)]
    sync.wait(keys, "every rank's result", lambda _: None, watch_failures=False)
    results = [mine, *(pickle.loads(ctx.exchange.store.get(k)) for k in keys)]
    for key in keys:
        ctx.exchange.store.delete_key(key)  # traces are large: the store keeps no schedule's past its verdict
    # A rank that stopped because a peer failed adds nothing: the peer's failure is the finding.
    results = [replace(r, error=None) if _peer_failed(r) else r for r in results]
    outcome = ScenarioOutcome(Scenario(SCHEDULE_SCENARIO, {"scenario": s.name, "schedule": task.text}), results)
    problems = scenario_problems(outcome)
    if not problems:
        problems = same_usable_prefix_problems(outcome)
    steps = mine.notes.get(STEPS_NOTE)
    log: RunLog | None = mine.notes.get("run") or (RunLog(task.setup, tuple(steps), steps[-1].state, cut=False) if steps else None)
    if log is None and not problems:
        problems = ["the schedule's run recorded no log"]
    if problems:
        _record(ctx, search, Failure(mine.notes.get(SCHEDULE_NOTE, task.text), tuple(problems), search.explored, time.perf_counter() - started))
    next_task = None
    # After a failure the search goes on (from where the run stopped) for failures naming other clauses, up to a few.
    if log is not None and len(search.failures) < MAX_FAILURES:
        next_task = search.next(log, failed=bool(problems))
        if next_task is not None and search.explored >= s.max_schedules:
            search.failures.append(Failure(task.text, (f"more than {s.max_schedules} schedules: shrink the scenario",), search.explored,
                                           time.perf_counter() - started))
            next_task = None
    classes, naive = search.reduction()
    summary = Summary(s.name, search.explored, classes, naive, time.perf_counter() - started, len(search.counts), list(search.failures))
    return Verdict(tuple(problems), summary, next_task)
