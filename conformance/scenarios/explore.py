"""Systematic exploration: every order of IO steps and scheduler steps in small scenarios.

Model. An implementation's IO thread reaches a gate point at the IO_START of
each prefetch transfer (each KV batch, each extra-pool transfer). The explorer
holds the thread at every such point (conformance.gates.Gate). Between two
actions the system is quiet: the IO thread is parked at its next gate point,
or it has recorded IO_DONE and starts nothing more. In a quiet state the
explorer picks one enabled action:

    io     release the parked IO step (the thread runs to its next gate or to io_done)
    check  one scheduler step: cache.check_progress([request])
    tick   advance the clock past the operation's timeout budget
    abort  cache.abort(request)

A schedule is the sequence of actions taken, written "io,check,tick,io".
explore() enumerates every schedule of a scenario depth first, running each
from the start on a fresh cache, ends it with one scheduler step over no
requests (where slots of ended operations may be freed), and checks the spec's
invariants, the loaded bytes and the slot accounting. replay() runs one
schedule again. Enabled actions are derived from the trace and the gate
arrivals only: nothing sleeps, every wait is bounded and names what hung.

Pruning, so that a scenario has finitely many schedules: `check` is enabled
only while the request is unfinished and never twice in a row (a check that
did not finish the request changes nothing a later action depends on);
`tick` and `abort` at most as often as the scenario allows, only while the
request is unfinished; `io` whenever a step is parked, also after the request
finished (the steps then drain). Single process: one operation, one IO thread
at a time reaching gates; cross-rank orders are another suite's business.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from conformance.errors import ConformanceFailure
from conformance.bounds import WAIT_S
from conformance.oracles.outcome import assert_decisions_conform, check_committed_outcome
from conformance.scenarios.catalogue import Scenario
from conformance.gates import Hold, ObservedGate, WatchedTrace, prefetch_load_of
from conformance.scenarios.schedule_model import DEFAULT_IO_ORDER, ScheduleModel
from conformance.scenarios.workload import request_data, request_tokens, store
from spec.clock import ManualClock
from spec.errors import ConfigError
from spec.timeout import timeout_budget
from spec.trace import Event, EventKind

ACTIONS = ("io", "check", "tick", "abort")
REQUEST_ID = "explored"

MakeCache = Callable[..., Any]


class ExplorationError(ConformanceFailure):
    """A schedule failed; the message carries the schedule and how to replay it."""

    def __init__(self, message: str, *, scenario: "Scenario", schedule: str, explored: int) -> None:
        super().__init__(message)
        self.scenario = scenario
        self.schedule = schedule
        self.explored = explored


class NondeterminismError(ConformanceFailure):
    """The same schedule prefix led to different enabled actions on two runs."""


class ReplayError(ConformanceFailure):
    """A replayed schedule named an action that is not enabled at that point."""


@dataclass(frozen=True)
class RunResult:
    """One schedule, run to its end and checked."""

    schedule: tuple[str, ...]
    enabled: tuple[tuple[str, ...], ...]  # the enabled actions before each action taken
    kinds: tuple[str, ...]  # trace event kinds from the operation's start on
    committed: int  # tokens the request committed (0 when aborted)
    loaded_tokens: int
    io_steps: int  # IO steps that reached their gate point
    extra_pools: int  # pools besides KV that the cache runs with

    @property
    def text(self) -> str:
        return format_schedule(self.schedule)


@dataclass
class Exploration:
    scenario: Scenario
    schedules: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0
    extra_pools: int = 0

    @property
    def count(self) -> int:
        return len(self.schedules)


def format_schedule(actions: Sequence[str]) -> str:
    return ",".join(actions)


def parse_schedule(schedule: str | Sequence[str]) -> tuple[str, ...]:
    actions = tuple(a.strip() for a in schedule.split(",")) if isinstance(schedule, str) else tuple(schedule)
    if actions == ("",):
        return ()
    for index, action in enumerate(actions):
        if action not in ACTIONS:
            raise ConfigError(f"schedule[{index}]", action, "one of " + ", ".join(ACTIONS))
    return actions


# --- exploring ---------------------------------------------------------------------------

def explore(
    make_cache: MakeCache,
    scenario: Scenario,
    *,
    storage_dir: Path | None = None,
    max_schedules: int = 5000,
    timeout_s: float = WAIT_S,
    root: Sequence[str] = (),
    io_order: str = DEFAULT_IO_ORDER,
    profile: str | None = None,
) -> Exploration:
    """Run every schedule of `scenario` that begins with `root`, depth first, each on a fresh cache from make_cache.

    root: a schedule prefix (schedule_model.suite_roots) whose subtree alone is
    explored; on the way to it the cache must offer exactly the actions the
    spec's model (with the declared io_order) offers, or the subtrees would not
    add up to the whole. Raises ExplorationError at the first schedule that
    fails, naming it and how to replay it; NondeterminismError when a prefix
    does not reproduce.
    """
    __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
    result = Exploration(scenario)
    began = time.perf_counter()
    root = parse_schedule(tuple(root))
    prefix: tuple[str, ...] = root
    parent_enabled: tuple[tuple[str, ...], ...] = ()
    while True:
        if result.count >= max_schedules:
            raise ExplorationError(
                f"scenario {scenario.name}: more than {max_schedules} schedules; shrink the scenario",
                scenario=scenario, schedule=format_schedule(prefix), explored=result.count,
            )
        try:
            run = _Run(make_cache, scenario, storage_dir, timeout_s, profile).execute(prefix, parent_enabled)
        except (NondeterminismError, ReplayError):
            raise
        except Exception as exc:
            text = format_schedule(getattr(exc, "_explore_schedule", prefix))
            raise ExplorationError(
                f"scenario {scenario.name}: schedule '{text}' failed (after {result.count} schedules passed):\n"
                f"{type(exc).__name__}: {exc}\n"
                f"replay: explore.replay(make_cache, catalogue.SCENARIOS[{scenario.name!r}], {text!r})",
                scenario=scenario, schedule=text, explored=result.count,
            ) from exc
        if not result.schedules and root:
            _check_root(scenario, root, run, io_order, profile)
        result.schedules.append(run.text)
        result.extra_pools = run.extra_pools
        backtrack = _next_prefix(run, floor=len(root))
        if backtrack is None:
            result.elapsed_s = time.perf_counter() - began
            return result
        prefix, parent_enabled = backtrack


def _check_root(scenario: Scenario, root: tuple[str, ...], run: RunResult, io_order: str, profile: str | None) -> None:
    __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
    walked = ScheduleModel(scenario, run.extra_pools, io_order, profile).walk(root)
    want = None if walked is None else tuple(walked[0])
    if run.enabled[: len(root)] != want:
        raise ExplorationError(
            f"scenario {scenario.name}: on the way to '{format_schedule(root)}' the cache offered the actions "
            f"{list(run.enabled[: len(root)])}; the spec's model ({run.extra_pools} extra pools, IO order {io_order!r}) "
            f"offers {list(want) if want else 'no such schedule'} (an IO started after terminate, or an IO order other than the declared one)",
            scenario=scenario, schedule=format_schedule(root), explored=0,
        )


def _next_prefix(run: RunResult, floor: int = 0) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]] | None:
    """The deepest position (at or below `floor`) with an untried alternative: the schedule up to it plus that alternative."""
    for index in range(len(run.schedule) - 1, floor - 1, -1):
        options = run.enabled[index]
        position = options.index(run.schedule[index])
        if position + 1 < len(options):
            return run.schedule[:index] + (options[position + 1],), run.enabled[: index + 1]
    return None


def replay(
    make_cache: MakeCache,
    scenario: Scenario,
    schedule: str | Sequence[str],
    *,
    enabled: Sequence[Sequence[str]] = (),
    storage_dir: Path | None = None,
    timeout_s: float = WAIT_S,
    profile: str | None = None,
) -> RunResult:
    """Run `schedule` again (a prefix is completed with the first enabled action at each point).

    enabled: the enabled actions an earlier run saw before each action
    (RunResult.enabled); a different set raises NondeterminismError.
    profile: the architecture profile the implementation declares (spec/profiles.py).
    """
    __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
    expected = tuple(tuple(options) for options in enabled)
    return _Run(make_cache, scenario, storage_dir, timeout_s, profile).execute(parse_schedule(schedule), expected)


# --- one run -------------------------------------------------------------------------------


class _Monitor:
    """What the explorer knows about the request's IO thread: gate arrivals and IO_DONE, from the trace."""

    def __init__(self, request_id: str, clock: ManualClock, timeout_s: float, profile: str | None = None) -> None:
        self.request_id = request_id
        self.timeout_s = timeout_s
        self.trace = WatchedTrace(clock, profile=profile)
        self.gate = ObservedGate(self.trace, prefetch_load_of(request_id), timeout_s=timeout_s)
        self._done_seen = False

    @property
    def arrivals(self) -> list[Event]:
        return self.gate.arrivals

    def io_done(self) -> bool:
        if not self._done_seen:
            self._done_seen = self.trace.has(EventKind.IO_DONE, self.request_id)
        return self._done_seen

    def wait_quiet(self, released: int, after: str) -> None:
        __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
        self.trace.wait_until(
            lambda: len(self.gate.arrivals) > released or self.io_done(),
            self.timeout_s,
            f"after {after}: the IO thread of {self.request_id} reaching IO step {released + 1}'s gate or recording io_done",
        )

    def parked(self, released: int) -> bool:
        return self.gate.arrived() > released


class _Run:
    def __init__(self, make_cache: MakeCache, scenario: Scenario, storage_dir: Path | None, timeout_s: float, profile: str | None = None) -> None:
        self.make_cache = make_cache
        self.scenario = scenario
        self.storage_dir = storage_dir
        self.timeout_s = timeout_s
        self.clock = ManualClock(1000.0)
        self.monitor = _Monitor(REQUEST_ID, self.clock, timeout_s, profile)
        self.trace = self.monitor.trace
        self.gate = self.monitor.gate
        self.holds: list[Hold] = []
        self.schedule: list[str] = []
        self.enabled_log: list[tuple[str, ...]] = []
        self.released = 0
        self.finished = False
        self.committed = 0
        self.ticks = 0
        self.aborts = 0
        self._loaded_tokens = 0

    def execute(self, prefix: tuple[str, ...], parent_enabled: tuple[tuple[str, ...], ...]) -> RunResult:
        __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
        s = self.scenario
        fields: dict[str, Any] = dict(
            policy=s.policy, page_size=s.page_size, termination=s.termination,
            trace=self.trace, clock=self.clock, batch_pages=s.batch_pages,
        )
        if s.extra_pools is not None:
            fields["extra_pools"] = s.extra_pools
        if self.storage_dir is not None:
            fields["storage_dir"] = self.storage_dir
        cache = self.make_cache(**fields)
        try:
            result = self._body(cache, prefix, parent_enabled)
        except BaseException as exc:
            exc._explore_schedule = tuple(self.schedule)  # type: ignore[attr-defined]
            self.gate.release_all()
            try:
                cache.close()
            except Exception:
                pass  # the first failure is the one to report
            self.gate.close()
            raise
        self.gate.release_all()
        cache.close()
        self.gate.close()
        alive = [t.name for t in cache.threads() if t.is_alive()]
        if alive:
            raise ExplorationError(
                f"scenario {s.name}: threads still running after close(): {alive}",
                scenario=s, schedule=result.text, explored=0,
            )
        return result

    def _body(self, cache: Any, prefix: tuple[str, ...], parent_enabled: tuple[tuple[str, ...], ...]) -> RunResult:
        __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
        s = self.scenario
        tokens = request_tokens(s.seed, s.tokens)
        data = request_data(cache, tokens, s.seed)
        store(cache, tokens, data)
        # One hold per possible IO step: the k-th step to arrive claims the k-th hold.
        self.holds = [self.gate.hold(f"{REQUEST_ID} IO step {k + 1}", self.gate.watch) for k in range(s.kv_batches + 8)]
        started = len(self.trace.events())
        requested = cache.prefetch(REQUEST_ID, tokens)
        assert requested == s.tokens, f"prefetch of {s.tokens} stored tokens requested {requested}"
        self.monitor.wait_quiet(0, "prefetch")
        while True:
            enabled = self._enabled()
            position = len(self.schedule)
            if position < len(parent_enabled) and enabled != parent_enabled[position]:
                raise NondeterminismError(
                    f"scenario {s.name}: after '{format_schedule(self.schedule)}' the enabled actions were "
                    f"{parent_enabled[position]} on an earlier run and {enabled} now"
                )
            if not enabled:
                break
            if position >= s.max_actions:
                raise AssertionError(f"scenario {s.name}: still running after {s.max_actions} actions")
            if position < len(prefix):
                action = prefix[position]
                if action not in enabled:
                    raise ReplayError(
                        f"scenario {s.name}: action {position} '{action}' of '{format_schedule(prefix)}' "
                        f"is not enabled after '{format_schedule(self.schedule)}' (enabled: {', '.join(enabled)})"
                    )
            else:
                action = enabled[0]
            self.enabled_log.append(enabled)
            self.schedule.append(action)
            self._do(cache, action)
        if len(self.schedule) < len(prefix):
            raise ReplayError(
                f"scenario {s.name}: the run ended after '{format_schedule(self.schedule)}', "
                f"before the rest of '{format_schedule(prefix)}'"
            )
        if not self.finished:
            raise AssertionError(
                f"L1/L2: request {REQUEST_ID} ({s.policy}) did not finish: its IO ended and the last scheduler step did not terminate it"
            )
        # Slots released when IO on an ended operation ended may be freed only at
        # the next scheduler step (an agreed point across ranks): run one.
        settled = cache.check_progress([])
        assert not settled, f"X4: a scheduler step over no requests reported {settled}"
        self._check_outcome(cache, tokens, data)
        events = self.trace.events()
        return RunResult(
            schedule=tuple(self.schedule),
            enabled=tuple(self.enabled_log),
            kinds=tuple(e.kind.value for e in events[started:]),
            committed=self.committed,
            loaded_tokens=self._loaded_tokens,
            io_steps=len(self.monitor.arrivals),
            extra_pools=len(cache.pools) - 1,
        )

    def _enabled(self) -> tuple[str, ...]:
        out = []
        if self.monitor.parked(self.released):
            out.append("io")
        if not self.finished:
            if not self.schedule or self.schedule[-1] != "check":
                out.append("check")
            if self.ticks < self.scenario.ticks:
                out.append("tick")
            if self.aborts < self.scenario.aborts:
                out.append("abort")
        return tuple(out)

    def _do(self, cache: Any, action: str) -> None:
        __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
        if action == "io":
            if self.released >= len(self.holds):
                raise AssertionError(f"more than {len(self.holds)} IO steps for one prefetch of {self.scenario.pages} pages")
            self.holds[self.released].release()
            self.released += 1
            self.monitor.wait_quiet(self.released, f"releasing IO step {self.released} ('{format_schedule(self.schedule)}')")
            if len(self.monitor.arrivals) > len(self.holds):
                raise AssertionError(f"an IO step passed its gate unheld (more than {len(self.holds)} steps)")
        elif action == "check":
            done = cache.check_progress([REQUEST_ID])
            unexpected = set(done) - {REQUEST_ID}
            assert not unexpected, f"X4: check_progress reported requests it was not asked about: {sorted(unexpected)}"
            if REQUEST_ID in done:
                self.finished = True
                self.committed = int(done[REQUEST_ID])
        elif action == "tick":
            self.ticks += 1
            self.clock.advance(timeout_budget(self.scenario.termination, self.scenario.pages) + 1.0)
        elif action == "abort":
            self.aborts += 1
            cache.abort(REQUEST_ID)
            self.finished = True
            self.committed = 0
        else:  # pragma: no cover - parse_schedule rejects others
            raise ConfigError("action", action, "one of " + ", ".join(ACTIONS))

    def _check_outcome(self, cache: Any, tokens: list[int], data: dict) -> None:
        __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
        s = self.scenario
        assert_decisions_conform(self.trace, s.termination)  # a wrong vote first: what follows from it is not L1's
        if s.policy == "wait_complete" and self.aborts == 0:
            assert self.committed == s.tokens, f"L1: wait_complete committed {self.committed} of {s.tokens} tokens although every IO succeeded"
        loaded = check_committed_outcome(cache, self.trace, s.termination, tokens, data, self.committed)
        self._loaded_tokens = loaded.tokens


# --- the checks every run (and every fault scenario) ends with -------------------------------


