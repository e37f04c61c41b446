"""What a multi-rank scenario drives on one rank: a RankContext (the scenario, its caches, the exchange of
decisions) and a CacheHandle per cache (its clock, trace and IO valve; moving IO level by level, the
scheduler's checks, load-back and the closing accounting).

Determinism: each cache gets an IoValve (conformance/gates.py) as its trace
gate. It parks every storage->host load of the prefetches a scenario controls,
so a scenario moves each rank's IO forward stage by stage (rank 0 fast, rank 1
slow, one rank's extra pool pending, ...) before each scheduler step, and can
move it between a rank's vote and its terminate (window 2). Waits are bounded
and driven by trace events, never by sleeps. The valve assumes the
implementation's IO thread serves prefetches one at a time, in order (as the
shared core does), and the default IO order (KV, then the extra-pool transfer:
ADAPTERS.md, "IO order"); the multi-rank tests say so with an io_order marker.
"""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch

from conformance.errors import ConformanceFailure
from conformance.adapter import CacheEnv, adapter_page_size
from conformance.gates import IoValve, ObservedTrace
from conformance.implementations.declarations import declarations
from conformance.multirank.decisions import CheckDecision, DecisionDeviation, DecisionExchange, decision_problems
from conformance.multirank.heartbeat import Heartbeat
from conformance.multirank.records import WAITING, CheckRecord, Launch, LoadRecord, RankScenarioResult, Scenario
from conformance.multirank.scenarios import BATCH_PAGES, LEVELS, SCENARIOS
from conformance.oracles.lifecycle import background_errors
from conformance.oracles.outcome import assert_loaded_writes
from spec.clock import ManualClock
from spec.config import TerminationConfig
from spec.decision import VOTE_COLLECTIVE
from spec.errors import ConfigError
from spec.fence import HitPolicy
from spec.profiles import TimerStart
from spec.trace import Event, EventKind


class ScenarioFailure(ConformanceFailure):
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

    def wait(self, predicate: Callable[[], bool], what: str, *, clause: str | None = None) -> None:
        """Bounded; `clause`: the rule broken when it never happens (a wait for IO to end: L4)."""
        with self.trace.changed:
            if predicate():
                return
        label = f"{clause}: " if clause else ""
        # WAITING marks a rank held by the harness itself: a hang report does not count its missing collectives (L3).
        self.ctx.heartbeat.phase(f"{self.ctx.scenario.label} {self.ctx.result.phase}, {label}{WAITING}{what}")
        with self.trace.changed:
            if not self.trace.changed.wait_for(predicate, self.ctx.wait_timeout_s):
                raise ScenarioFailure(f"{label}rank {self.ctx.rank}: {what} did not happen within {self.ctx.wait_timeout_s}s")
        self.ctx.phase(self.ctx.result.phase)

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

    def start_wait(self, ids: Sequence[str]) -> None:
        """Start the timeout's timer where the declared profile starts it (every rank calls this at the same point).

        The vote per check counts from the operation's start: nothing to do.
        A profile that starts its timer at the first check finding the
        prefetch unfinished (the ACK drain) gets that check now, before any
        clock moves; it must finish nothing.
        """
        if self.ctx.profile.timer_start is TimerStart.FIRST_BLOCKED_CHECK:
            finished = self.check(ids)
            if finished:
                raise ScenarioFailure(f"test setup: rank {self.ctx.rank}: the check that starts the timer finished {sorted(finished)}")

    def between_vote_and_terminate(self, op: str, level: str) -> None:
        """Window 2: at this rank's vote collective for op, move its IO to `level` before terminate runs."""

        def is_vote(e: Event) -> bool:
            return e.kind is EventKind.COLLECTIVE and e.value == VOTE_COLLECTIVE and e.op == op

        self.trace.once(is_vote, lambda _e: self.to(op, level))

    def check(self, ids: Sequence[str]) -> dict[str, int]:
        """One scheduler step over the agreed ids; raises DecisionDeviation when a decision on any rank is not the spec's."""
        self._steps += 1
        label = f"cache {self.index} check {self._steps}"
        key = f"cache{self.index}/check{self._steps}"
        self.ctx.phase(f"{label} over {list(ids)}")
        # Ids this rank dropped, finished, or never queued: it joins their collectives neutrally (X4).
        untracked = self.aborted | set(self.committed) | {op for op in ids if not self.ctx.result.requested.get(op)}
        mark = len(self.trace.events())

        published: set[str] = set()

        def publish(op: str, decided: bool) -> None:
            if op in published:
                return
            published.add(op)
            vote = next((e for e in reversed(self.trace.events()[mark:]) if e.kind is EventKind.VOTE and e.op == op), None)
            self.ctx.exchange.publish(key, op, CheckDecision(op not in untracked, decided, None if vote is None else bool(vote.value),
                                                             None if vote is None else vote.state))

        self.trace.on_terminate = lambda e: publish(e.op, True) if e.op in ids else None
        try:
            finished = dict(self.cache.check_progress(list(ids)))
        finally:
            self.trace.on_terminate = None
        self.committed.update(finished)
        self.ctx.result.checks.append(CheckRecord(self.index, label, tuple(ids), finished, frozenset(self.aborted)))
        for op in ids:
            publish(op, op in finished)
        self.ctx.phase(f"{label}: judging every rank's decisions")
        problems = [p for op in ids for p in decision_problems(label, op, self.ctx.exchange.gather(key, op), self.ctx.profile)]
        if problems:
            raise DecisionDeviation("\n".join(problems))
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
                assert_loaded_writes(self.cache, loaded, writes)
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
                self.wait(lambda: view.io_done, f"IO of {op} ending after its valve opened", clause="L4")
        self.check([])
        self.ctx.phase(f"cache {self.index}: evicting everything")
        self.cache.evict_all()
        for name, (allocated, free, capacity) in self.cache.slot_accounting().items():
            if allocated:
                self.ctx.result.leaks.append(f"F8: cache {self.index} {name}: {allocated} of {capacity} slots still allocated after every prefetch ended and evict_all()")
            if allocated + free != capacity:
                self.ctx.result.leaks.append(f"S3: cache {self.index} {name}: allocated {allocated} + free {free} != capacity {capacity}")
        # Closing joins the cache's threads, each join within its own bound (a storage thread whose loop caught an
        # error stays alive and runs out its join's bound): a teardown step, judged like setup by the startup bound.
        self.ctx.phase(f"cache {self.index}: closing", setup=True)
        self.cache.close()
        self.ctx.result.leftover_threads += [t.name for t in self.cache.threads() if t.is_alive()]
        self.ctx.result.unfired_faults += [f"the fault '{fault}' (cache {self.index}) never fired" for fault in self.valve.unfired()]


class RankContext:
    """What a scenario function sees on one rank."""

    def __init__(self, plan: Launch, rank: int, index: int, scenario: Scenario, device: str, adapter, heartbeat: Heartbeat,
                 exchange: DecisionExchange, save_partial: Callable[[RankScenarioResult], None]) -> None:
        self.plan = plan
        self.rank = rank
        self.world_size = plan.world_size
        self.index = index
        self.scenario = scenario
        self.device = device
        self.adapter = adapter
        self.profile = declarations(adapter).profile  # whose vote, combine and timer judge this rank's decisions
        self.page_size = adapter_page_size(adapter)  # every request of a scenario is sized by it
        self.heartbeat = heartbeat
        self.exchange = exchange
        self.save_partial = save_partial
        self.wait_timeout_s = plan.wait_timeout_s
        self.result = RankScenarioResult(scenario.label, rank)
        self.handles: list[CacheHandle] = []
        # Several vote groups for the caches of this scenario (scenario_in_groups): kind -> rank partition.
        self.process_groups: Mapping[str, Sequence[Sequence[int]]] | None = None

    def phase(self, text: str, *, setup: bool = False) -> None:
        self.result.phase = text
        self.heartbeat.phase(f"{self.scenario.label} {text}", setup=setup)

    def cache(self, policy: str, **env_fields: Any) -> CacheHandle:
        import torch.distributed as dist

        index = len(self.handles)
        termination = TerminationConfig(policy=policy, page_size=self.page_size)
        clock = ManualClock(1000.0)
        trace = ObservedTrace(clock, rank=self.rank, profile=self.profile.id)
        valve = IoValve(trace, self.rank, self.wait_timeout_s)
        env = CacheEnv(
            device=self.device,
            termination=termination,
            # One storage for every rank, as a deployment gives its ranks one directory or service: each rank's
            # shard is its own (its keys or folder name the rank), and a rank-replicated KV is stored once for all.
            storage_dir=env_fields.pop("storage_dir", Path(self.plan.workdir) / f"scenario{self.index}" / f"cache{index}"),
            clock=clock,
            trace=trace,
            extra_pools=tuple(env_fields.pop("extra_pools", self.adapter.default_extra_pools)),
            # A scenario may place a cache in a deployment of its own (a subgroup of the launch's ranks).
            rank=env_fields.pop("rank", self.rank),
            world_size=env_fields.pop("world_size", self.world_size),
            process_group=env_fields.pop("process_group", dist.group.WORLD if self.process_groups is None else None),
            process_groups=self.process_groups,
            batch_pages=env_fields.pop("batch_pages", BATCH_PAGES),
            wait_timeout_s=self.wait_timeout_s,
            **env_fields,
        )
        # The new cache's trace from its creation on: a rank still creating it shows no collective of it yet, not
        # its previous cache's, which a hang report would otherwise compare with a faster peer's new ones.
        self.heartbeat.trace = trace
        self.phase(f"creating cache {index}", setup=True)
        session = self.adapter.create(env)
        self.phase(f"cache {index} created")
        handle = CacheHandle(self, index, session, trace, clock, valve, termination)
        self.handles.append(handle)
        self.heartbeat.deaths = getattr(session, "background_errors_now", None)
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
        except BaseException as exc:
            # A scenario's own finding is its message; anything else needs the traceback.
            short = isinstance(exc, (ScenarioFailure, DecisionDeviation))
            self.result.error = f"{type(exc).__name__}: {exc}" if short else traceback.format_exc(limit=6)
            self.result.traces = [h.trace.trace() for h in self.handles]
            self.save_partial(self.result)
            for handle in self.handles:
                handle.valve.open_all()  # parked IO threads must not outlive the scenario
                try:
                    handle.cache.close()
                except BaseException as exc:
                    self.result.error += f"\n(close also failed: {exc})"
        self.result.traces = [h.trace.trace() for h in self.handles]
        self.result.background_errors = [error for h in self.handles for error in background_errors(h.cache)]
        return self.result  # the heartbeat keeps this trace until the next cache: a peer may still hang on it
