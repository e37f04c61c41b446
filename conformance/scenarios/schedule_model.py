"""What the spec predicts for an exploration (conformance/scenarios/explore.py): the schedules a conforming cache yields.

The model is the spec's state machine over the explorer's actions (io,
check, tick, abort), never an implementation. The one thing it takes from
the implementation is its declared IO order (the adapter's optional
`io_order`, ADAPTERS.md), since the spec allows more than one:

    kv_then_extras          KV batch by batch, then one multi-pool get for
                            every extra pool (the default; the shared core)
    extras_with_each_batch  each KV batch and every extra pool's pages of
                            that batch in one multi-pool get, batch by batch

Either way the IO runs in *groups* of transfers, one group after the other;
each transfer stops once at its gate point (IO_START), in order, and a group
once begun runs to its end (one storage call). Terminate (a check that
terminates, or an abort) lets the group holding the parked transfer end and
starts no group after it (F1). A check terminates under best_effort always
(D1), otherwise when every transfer ended (D2-D4), or under timeout after a
tick (D5). The implementation's architecture profile (spec/profiles.py) says
when the timeout's timer starts (at the operation's start, or at the first
check that finds it unfinished: a tick before that check counts for
nothing) and whether the timeout cuts an operation whose KV has landed (the
ACK drain waits for its commit instead, A1).

Exploration splits into subtrees by schedule prefix (`roots`), so that xdist
can spread one scenario over several workers; the subtrees' counts add up to
the scenario's.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Iterator, Sequence

from spec.config import Policy
from spec.decision import DecisionState
from spec.divergences import suffix as divergence_suffix
from spec.errors import ConfigError
from spec.profiles import Profile, TimerStart, profile as find_profile

KV_THEN_EXTRAS = "kv_then_extras"
EXTRAS_WITH_EACH_BATCH = "extras_with_each_batch"
IO_ORDERS = (KV_THEN_EXTRAS, EXTRAS_WITH_EACH_BATCH)
DEFAULT_IO_ORDER = KV_THEN_EXTRAS


def check_io_order(value: Any, field: str = "io_order") -> str:
    if not isinstance(value, str) or value not in IO_ORDERS:
        raise ConfigError(field, value, "one of " + ", ".join(repr(o) for o in IO_ORDERS))
    return value


def adapter_io_order(adapter: Any) -> str:
    """The adapter's declared IO order (the optional `io_order` member), the default when it declares none."""
    return check_io_order(getattr(adapter, "io_order", DEFAULT_IO_ORDER), f"{getattr(adapter, 'name', 'adapter')}.io_order")


def io_groups(io_order: str, kv_batches: int, extra_pools: int) -> tuple[int, ...]:
    """The sizes of the IO groups of one prefetch, in order (each size: transfers, i.e. gate points)."""
    check_io_order(io_order)
    if io_order == KV_THEN_EXTRAS:
        return (1,) * kv_batches + ((extra_pools,) if extra_pools else ())
    return (1 + extra_pools,) * kv_batches


@dataclass(frozen=True)
class _State:
    released: int  # transfers released past their gate
    limit: int  # transfers that will ever run (all of them until terminate)
    finished: bool
    after_check: bool
    ticks: int
    aborts: int
    timed: int  # ticks since the timeout's timer started; -1 before it started


class ScheduleModel:
    """The spec's state machine for one scenario (anything with policy, kv_batches, ticks, aborts)."""

    def __init__(self, scenario: Any, extra_pools: int, io_order: str = DEFAULT_IO_ORDER, profile: Profile | str | None = None) -> None:
        self.scenario = scenario
        self.policy = Policy.parse(scenario.policy)
        self.groups = io_groups(io_order, scenario.kv_batches, extra_pools)
        self.io_order = io_order
        self.total = sum(self.groups)
        self.profile = find_profile(profile)
        # Transfers released once every KV batch has: KV has landed (what the landed-KV divergence holds for).
        self.kv_released = scenario.kv_batches * (1 if io_order == KV_THEN_EXTRAS else 1 + extra_pools)
        self._count = lru_cache(maxsize=None)(self._count_uncached)

    def _stop(self, released: int, limit: int) -> int:
        """Where IO stops when terminate comes with `released` transfers released: the parked one's group ends."""
        if released >= limit:
            return limit
        end = 0
        for size in self.groups:
            end += size
            if released < end:
                return min(end, limit)
        return limit

    def start(self) -> _State:
        timed = 0 if self.profile.timer_start is TimerStart.OPERATION_START else -1
        return _State(0, self.total, False, False, 0, 0, timed)

    def _times_out(self, s: _State) -> bool:
        """Whether a check in state s ends the wait by the timeout: every profile cuts what is pending past the deadline (A1, D5)."""
        return self.policy is Policy.TIMEOUT and s.timed > 0

    def transitions(self, s: _State) -> list[tuple[str, _State]]:
        """The enabled actions in the explorer's order (io, check, tick, abort) and where each leads."""
        out = []
        if s.released < s.limit:
            out.append(("io", _State(s.released + 1, s.limit, s.finished, False, s.ticks, s.aborts, s.timed)))
        if not s.finished:
            if not s.after_check:
                terminates = self.policy is Policy.BEST_EFFORT or s.released == self.total or self._times_out(s)
                limit = self._stop(s.released, s.limit) if terminates else s.limit
                out.append(("check", _State(s.released, limit, terminates, True, s.ticks, s.aborts, max(s.timed, 0))))
            if s.ticks < self.scenario.ticks:
                out.append(("tick", _State(s.released, s.limit, False, False, s.ticks + 1, s.aborts, s.timed + 1 if s.timed >= 0 else -1)))
            if s.aborts < self.scenario.aborts:
                out.append(("abort", _State(s.released, self._stop(s.released, s.limit), True, False, s.ticks, s.aborts + 1, s.timed)))
        return out

    def _count_uncached(self, s: _State) -> int:
        return sum(self._count(after) for _, after in self.transitions(s)) or 1

    def walk(self, prefix: Sequence[str]) -> tuple[list[tuple[str, ...]], _State] | None:
        """The enabled actions before each action of `prefix` and the state after it; None if it is no schedule's prefix."""
        state, enabled = self.start(), []
        for action in prefix:
            options = dict(self.transitions(state))
            if action not in options:
                return None
            enabled.append(tuple(options))
            state = options[action]
        return enabled, state

    def count(self, root: Sequence[str] = ()) -> int:
        """Schedules beginning with `root` (all of them for the empty root)."""
        walked = self.walk(root)
        return 0 if walked is None else self._count(walked[1])

    def schedules(self, root: Sequence[str] = ()) -> list[tuple[str, ...]]:
        """Every schedule beginning with `root`, in exploration order."""
        walked = self.walk(root)
        if walked is None:
            return []

        def below(prefix: tuple[str, ...], state: _State) -> Iterator[tuple[str, ...]]:
            options = self.transitions(state)
            if not options:
                yield prefix
            for action, after in options:
                yield from below(prefix + (action,), after)

        return list(below(tuple(root), walked[1]))

    def divergence(self, explored: Sequence[Sequence[str]], root: Sequence[str] = ()) -> str | None:
        """'<clause>: what differs' at the first schedule prefix where the cache offered other actions than the spec's model.

        The explored schedules give, for each prefix, the actions the cache
        offered next; the model gives the spec's. None when every prefix agrees.
        """
        offered: dict[tuple[str, ...], list[str]] = {}
        for schedule in explored:
            schedule = tuple(schedule)
            for index in range(len(root), len(schedule) + 1):
                following = offered.setdefault(schedule[:index], [])
                if index < len(schedule) and schedule[index] not in following:
                    following.append(schedule[index])
        for prefix, actions in offered.items():
            walked = self.walk(prefix)
            if walked is None:
                continue  # below a divergence already reported at a shorter prefix
            spec = [action for action, _ in self.transitions(walked[1])]
            extra = [a for a in actions if a not in spec]
            missing = [a for a in spec if a not in actions]
            if extra or missing:
                return self._explain(prefix, (extra or missing)[0], spec, offered_more=bool(extra)) + self._divergence(prefix, bool(extra))
        return None

    def _explain(self, prefix: tuple[str, ...], action: str, spec: Sequence[str], *, offered_more: bool) -> str:
        where = f"after '{','.join(prefix)}'" if prefix else "at the start"
        if action == "io":
            clause = "F1"  # IO the spec's terminate would have stopped, or a transfer of another IO order
            what = ("an IO step started that the spec's model does not start" if offered_more else "an IO step the spec starts did not") + (
                f" (IO after terminate, or an IO order other than the declared one, {self.io_order!r})")
        else:
            clause = self.profile.counterpart({Policy.BEST_EFFORT: "D1", Policy.WAIT_COMPLETE: "D4", Policy.TIMEOUT: "D5"}[self.policy])
            what = ("the request was still unfinished where the spec's decision had ended it" if offered_more
                    else "the request had finished where the spec's decision keeps waiting")
        return f"{clause}: {where}, '{action}': {what} (the spec offers {list(spec)})"

    def _divergence(self, prefix: Sequence[str], still_waiting: bool) -> str:
        """The divergence suffix when the cache kept waiting past a check that, past the deadline, found KV landed and an extra pool pending."""
        if not still_waiting or self.policy is not Policy.TIMEOUT:
            return ""
        s, at_check = self.start(), None
        for action in prefix:
            if action == "check":
                at_check = s
            s = dict(self.transitions(s))[action]
        if at_check is None or at_check.timed <= 0:
            return ""
        state = DecisionState(policy=self.policy, page_size=1, hit_pages=1, completed_tokens=int(at_check.released >= self.kv_released),
                              timed_out=True, pool_transfers_present=self.total > self.kv_released,
                              pool_transfers_done=at_check.released >= self.total, terminated=False)
        return divergence_suffix(state, False)

    def roots(self, depth: int) -> list[tuple[str, ...]]:
        """Every schedule prefix of `depth` actions (shorter where a schedule ends sooner), in exploration order."""

        def below(prefix: tuple[str, ...], state: _State) -> Iterator[tuple[str, ...]]:
            options = self.transitions(state)
            if len(prefix) == depth or not options:
                yield prefix
                return
            for action, after in options:
                yield from below(prefix + (action,), after)

        return list(below((), self.start()))


def expected_schedules(scenario: Any, extra_pools: int, io_order: str = DEFAULT_IO_ORDER, root: Sequence[str] = (),
                       profile: Profile | str | None = None) -> int:
    """How many schedules (beginning with `root`) a spec-conforming implementation of `profile` yields for `scenario`.

    A count that differs means an IO started after terminate, a transfer
    without a gate point, an IO order other than the declared one, or a vote
    other than the profile's.
    """
    return ScheduleModel(scenario, extra_pools, io_order, profile).count(root)


def split_depth(scenario: Any) -> int:
    """How deep the suite splits a scenario: two actions where that split is the same whatever the pools and IO order.

    The first two actions' options depend only on the policy, ticks and
    aborts when there are at least two KV batches (the second transfer is
    then always enabled after the first).
    """
    return 2 if scenario.kv_batches >= 2 else 1


def suite_roots(scenario: Any) -> list[tuple[str, ...]]:
    """The subtrees the suite explores a scenario in (any pool count, any IO order: split_depth)."""
    return ScheduleModel(scenario, 0).roots(split_depth(scenario))
