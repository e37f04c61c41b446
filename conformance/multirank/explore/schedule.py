"""One schedule on one rank: its setup, its actions as every rank agrees them, the canonical finish.

Runs inside a rank of the launch, on a fresh cache (conformance/multirank/driver.py's
CacheHandle: the injected clock, the trace, the IO valve that holds every
load of the request). Before each action every rank reports what it could do
and its state (model.LocalView) through the launch's store; every rank
merges the reports the same way (model.enabled), so all take the same
action, and each does its own part: a rank-local action on its owner, a
check on all. Waits are bounded and name what they waited for.
"""

from __future__ import annotations

import os
import pickle
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from conformance.multirank.checks import REQUESTED_MAY_DIFFER
from conformance.multirank.driver import CacheHandle, RankContext, ScenarioFailure
from conformance.multirank.explore.model import (
    CHECK, CURRENT_FILE, REQUEST, SCHEDULE_SCENARIO, CrossRankScenario, LocalView, Segment, enabled, format_schedule, global_state,
    local_action, read_setup, window_ranks,
)
from conformance.multirank.explore.search import RunLog, Step, Task
from conformance.multirank.records import Scenario
from conformance.multirank.scenarios import WAITING_TIMEOUT_S, rank_data, request_tokens
from conformance.scenarios.explore import NondeterminismError, ReplayError
from spec.decision import VOTE_COLLECTIVE
from spec.trace import BACKUP, LOAD, Event, EventKind

SCHEDULE_NOTE = "schedule"  # a result note: the schedule this rank ran, up to where it stopped
STEPS_NOTE = "steps"  # a result note: its positions so far (search.Step), for the search to go on from where a failed run stopped
FINISH_CHECKS = 3  # checks after every transfer ended, before a rank still waiting is a liveness failure


class ScheduleReplayError(ScenarioFailure, ReplayError):
    """A replayed schedule names an action the ranks do not enable at that point."""


class ScheduleNondeterminism(ScenarioFailure, NondeterminismError):
    """The same actions led to different enabled actions on two runs."""


class PeerFailed(ScenarioFailure):
    """A peer's schedule failed while this rank waited for its report: this rank stops too (the peer's error is the finding)."""


class StoreSync:
    """What every rank reports at each point of a run, through the launch's store (never a collective)."""

    POLL_S = 0.0005  # between two looks at the store while a peer is busy
    SAY_AFTER = 100  # polls (some 50 ms) before the heartbeat says so

    def __init__(self, store: Any, rank: int, world_size: int, timeout_s: float, prefix: str) -> None:
        self.store = store
        self.rank = rank
        self.world_size = world_size
        self.timeout_s = timeout_s
        self.prefix = prefix
        self.run = 0

    def key(self, name: str, rank: int | None = None) -> str:
        return f"{self.prefix}/{self.run}/{name}" + ("" if rank is None else f"/r{rank}")

    def share(self, name: str, value: Any, on_wait: Callable[[str], None] = lambda _: None) -> list[Any]:
        """Publish this rank's value under `name`; every rank's value, by rank."""
        self.store.set(self.key(name, self.rank), pickle.dumps(value))
        keys = [self.key(name, r) for r in range(self.world_size)]
        self.wait(keys, name, on_wait)
        return [pickle.loads(self.store.get(k)) for k in keys]

    def post(self, name: str, value: Any) -> None:
        self.store.set(self.key(name), pickle.dumps(value))

    def fetch(self, name: str, on_wait: Callable[[str], None] = lambda _: None) -> Any:
        """What rank 0 posted under `name` for this run."""
        key = self.key(name)
        self.wait([key], name, on_wait, watch_failures=False)
        return pickle.loads(self.store.get(key))

    def failed(self) -> None:
        """This rank's run failed: peers waiting for its reports stop instead of waiting out the bound."""
        self.store.set(self.key("failed"), str(self.rank).encode())

    def wait(self, keys: list[str], what: str, on_wait: Callable[[str], None], *, watch_failures: bool = True) -> None:
        """Bounded; polls, because the store waits for all of some keys, never for any (a report, or a peer's failure)."""
        if self.store.check(keys):
            return
        deadline = time.monotonic() + self.timeout_s
        failed = self.key("failed")
        pause = threading.Event()
        polls = 0
        while not self.store.check(keys):
            if watch_failures and self.store.check([failed]):
                raise PeerFailed(f"rank {int(self.store.get(failed))}'s schedule failed while rank {self.rank} waited for {what}")
            if time.monotonic() > deadline:
                raise ScenarioFailure(f"rank {self.rank}: the ranks' reports for {what} did not arrive within {self.timeout_s}s")
            polls += 1
            if polls == self.SAY_AFTER:  # a peer is busy for a while: the heartbeat says this rank waits for it, not in a collective
                on_wait(what)
            pause.wait(self.POLL_S)


class ScheduleRun:
    """One schedule on this rank (`ctx` is the schedule's own RankContext)."""

    def __init__(self, ctx: RankContext, scenario: CrossRankScenario, task: Task, sync: StoreSync, stored: set[str]) -> None:
        self.ctx = ctx
        self.scenario = scenario
        self.task = task
        self.sync = sync
        self.setup = read_setup(task.setup, ctx.rank, ctx.world_size)
        # What storage holds depends on the setup alone: each kind is written once per exploration, by the first
        # schedule needing it (every rank at the same schedule), and only read afterwards.
        self.variant = next((t for t in task.setup if t.startswith("miss")), "plain")
        self.stored = stored
        self.released = 0
        self.ticks = 0
        self.aborted = False
        self.taken: list[str] = []  # the actions taken so far
        self.h: CacheHandle | None = None

    # --- the run ---------------------------------------------------------------------------------

    def run(self) -> None:
        self.ctx.result.notes[SCHEDULE_NOTE] = self.task.text
        h = self.h = self._cache()
        tokens, writes = self._store(h)
        self._arm_fault(h)
        if self.setup.second_request == "before":
            self._write_second(h)
        h.prefetch(REQUEST, tokens)
        if self.setup.second_request == "during":
            self._write_second(h)
        self.ctx.result.notes["run"] = self._explore()
        self._finish(h, tokens, writes)

    def _cache(self) -> CacheHandle:
        s = self.scenario
        fields: dict[str, Any] = {"batch_pages": s.batch_pages, "storage_dir": Path(self.ctx.plan.workdir) / "storage" / self.variant}
        fields["extra_pools"] = s.pools_for(self.ctx.adapter)
        if self.setup.short_room:
            # Room for the request and one page more, on both tiers (a tier whose host is smaller than its device
            # tier cannot load its host back): a second request's pages fit on the device, not beside the prefetch.
            fields["host_pages"] = fields["device_pages"] = s.pages + 1
        if self.setup.second_request == "before":
            self.ctx.result.notes[REQUESTED_MAY_DIFFER] = True
        return self.ctx.cache(s.policy, **fields)

    def _store(self, h: CacheHandle) -> tuple[list[int], dict[int, Any]]:
        s = self.scenario
        tokens = request_tokens(self.ctx, s.seed, s.pages)
        first = self.variant not in self.stored
        self.stored.add(self.variant)
        if self.variant == "plain":
            data = rank_data(h, len(tokens), s.seed)
            if first:
                h.store(tokens, data)
            return tokens, {len(tokens): data}
        # Every rank stores the head, then the whole request; the rank missing the tail fails each backup of it.
        head = tokens[: len(tokens) - s.batch_pages * self.ctx.page_size]
        head_data = rank_data(h, len(head), s.seed + 1)
        data = rank_data(h, len(tokens), s.seed, prefix=head_data)
        if first:
            h.store(head, head_data)
            if self.setup.missing_tail:
                h.valve.fail("the backup of the request's last KV batch", lambda e: e.kind is EventKind.IO_START and e.value == BACKUP,
                             times=s.pages)
            h.store(tokens, data)
        return tokens, {len(head): head_data, len(tokens): data}

    def _arm_fault(self, h: CacheHandle) -> None:
        nth = self.setup.failing_load
        if nth is None:
            return
        seen: list[int] = []

        def nth_load(e: Event) -> bool:
            if e.kind is EventKind.IO_START and e.value == LOAD and e.op == REQUEST and e.io not in seen:
                seen.append(e.io)
                return len(seen) == nth
            return False

        h.valve.fail(f"load {nth} of {REQUEST}", nth_load)

    def _write_second(self, h: CacheHandle) -> None:
        tokens = request_tokens(self.ctx, self.scenario.seed + 7, self.scenario.pages)
        h.cache.write(tokens, rank_data(h, len(tokens), self.scenario.seed + 7))

    # --- the explored part -------------------------------------------------------------------------

    def view(self) -> LocalView:
        h = self.h
        requested = bool(self.ctx.result.requested.get(REQUEST))
        finished = h.committed.get(REQUEST)
        return LocalView(parked=h.valve.parked(REQUEST), tracked=requested and not self.aborted and finished is None,
                         released=self.released, io_done=h.trace.view(REQUEST).io_done, ticks=self.ticks,
                         aborted=self.aborted, finished=finished)

    def _explore(self) -> RunLog:
        task, s = self.task, self.scenario
        steps: list[Step] = []
        self.ctx.result.notes[STEPS_NOTE] = steps
        segment: list[str] = []
        checks = 0
        seen: set = set()
        position = 0
        while True:
            views = self.sync.share(f"v{position}", self.view(), self._waiting)
            state = global_state(s, views, checks)
            after_check = bool(steps) and steps[-1].action.startswith(CHECK)
            if after_check and position - 1 >= len(task.prefix) - 1 and not task.exact and any(v.tracked for v in views):
                if state in task.visited or state in seen:
                    return RunLog(task.setup, tuple(steps), state, cut=True)
                seen.add(state)
            options = enabled(s, views, Segment(tuple(segment)), checks, [v.ticks for v in views], sum(v.aborted for v in views))
            if position < len(task.parent_enabled) and options != task.parent_enabled[position]:
                raise ScheduleNondeterminism(f"after '{','.join(x.action for x in steps)}' the enabled actions were "
                                          f"{list(task.parent_enabled[position])} on an earlier run and {list(options)} now")
            if not options and position < len(task.prefix):
                raise ScheduleReplayError(f"the run of '{task.text}' ended after '{','.join(x.action for x in steps)}', before its rest")
            if task.exact and position >= len(task.prefix) or not options:
                return RunLog(task.setup, tuple(steps), state, cut=False)
            action = task.prefix[position] if position < len(task.prefix) else options[0]
            if action not in options:
                raise ScheduleReplayError(f"action {position} '{action}' of '{task.text}' is not enabled after "
                                  f"'{','.join(x.action for x in steps)}' (enabled: {', '.join(options) or 'nothing'})")
            steps.append(Step(options, state, action))
            self.taken.append(action)
            self.ctx.result.notes[SCHEDULE_NOTE] = format_schedule(task.setup, self.taken)
            self._do(action)
            position += 1
            if action.startswith(CHECK):
                checks, segment = checks + 1, []
            else:
                segment.append(action)

    def _waiting(self, what: str) -> None:
        """A peer's report is slow: say so, and which schedule runs (a hang report names it).

        Not a wait the harness holds this rank in (no WAITING mark): between two
        actions no collective is due, so a peer stuck in one its action took,
        alone, is a divergence (L3), which the hang report then names.
        """
        self._name_schedule()
        self.ctx.heartbeat.phase(f"{self.ctx.scenario.label} {self.ctx.result.phase}, waiting for every rank's report ({what}), "
                                 f"no collective due")

    def _name_schedule(self, *, in_file: bool = True) -> None:
        """The schedule so far, in this rank's result and heartbeat label, and in the launch's file a hang report reads it from."""
        text = format_schedule(self.task.setup, self.taken)
        self.ctx.result.notes[SCHEDULE_NOTE] = text
        self.ctx.scenario = Scenario(SCHEDULE_SCENARIO, {"scenario": self.scenario.name, "schedule": text})
        if in_file:  # any rank may write it: each through a temporary file of its own, then one atomic rename
            path = Path(self.ctx.plan.workdir) / CURRENT_FILE
            tmp = path.with_name(f"{path.name}.rank{self.ctx.rank}.tmp")
            tmp.write_text(text)
            os.replace(tmp, path)

    def _do(self, action: str) -> None:
        h, rank = self.h, self.ctx.rank
        local = local_action(action)
        if local is None:
            self._check(rank in window_ranks(action))
            return
        kind, owner = local
        if owner != rank:
            return
        if kind == "io":
            self._let_one_through()
        elif kind == "tick":
            self.ticks += 1
            h.time_out()
        else:
            self.aborted = True
            h.clock.advance(WAITING_TIMEOUT_S + 1.0)  # this rank's own clock passes the scheduler's waiting timeout
            h.abort(REQUEST)

    def _let_one_through(self) -> None:
        h = self.h
        view = h.trace.view(REQUEST)
        self.released += 1
        h.valve.allow(REQUEST)
        h.wait(lambda: view.io_done or h.valve.parked(REQUEST), f"IO of {REQUEST} held at its next load or ended (transfer {self.released})",
               clause="L4")

    def _check(self, window: bool) -> None:
        h = self.h
        self._name_schedule(in_file=self.ctx.rank == 0)  # a hang inside the check's collectives names the schedule up to it
        armed = [window]

        def between_vote_and_terminate(_e: Event) -> None:
            if armed[0] and h.valve.parked(REQUEST):
                armed[0] = False
                self._let_one_through()

        if window:
            h.trace.once(lambda e: e.kind is EventKind.COLLECTIVE and e.value == VOTE_COLLECTIVE and e.op == REQUEST,
                         between_vote_and_terminate)
        try:
            h.check([REQUEST])
        finally:
            armed[0] = False

    # --- the finish --------------------------------------------------------------------------------

    def _finish(self, h: CacheHandle, tokens: Sequence[int], writes: dict[int, Any]) -> None:
        """Every held transfer goes through; checks until no rank waits (bounded); load back what was committed."""
        self.ctx.phase(f"finishing '{self.task.text}'")
        h.release_all_io()
        view = h.trace.view(REQUEST)
        if self.ctx.result.requested.get(REQUEST):
            h.wait(lambda: view.io_done, f"IO of {REQUEST} ending after every transfer was let through", clause="L4")
        for round_ in range(FINISH_CHECKS + 1):
            waiting = self.sync.share(f"f{round_}", self.view().tracked, self._waiting)
            if not any(waiting):
                break
            if round_ == FINISH_CHECKS:
                clause = "L1" if self.scenario.policy != "timeout" else "L1/L2"
                ranks = [r for r, w in enumerate(waiting) if w]
                raise ScenarioFailure(f"{clause}: ranks {ranks} still wait for {REQUEST} after every transfer ended and "
                                      f"{FINISH_CHECKS} more checks ({self.scenario.policy})")
            h.check([REQUEST])
        if REQUEST in h.committed:
            h.load_and_compare(REQUEST, tokens, writes)
        self.ctx.result.matches[REQUEST] = tuple(h.cache.match(tokens))


def explored_schedule(ctx: RankContext, scenario: CrossRankScenario, task: Task, sync: StoreSync, stored: set[str]) -> None:
    """The body of one schedule's scenario (entry.py registers it); stored: the storage kinds written so far."""
    ScheduleRun(ctx, scenario, task, sync, stored).run()


__all__ = ["FINISH_CHECKS", "SCHEDULE_NOTE", "STEPS_NOTE", "PeerFailed", "ScheduleRun", "StoreSync", "explored_schedule"]
