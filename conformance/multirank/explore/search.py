"""The cross-rank explorer's search: which schedule runs next, what was explored, and how much was saved.

Depth first over the actions the ranks report enabled (model.enabled), per
setup: each run is the previous schedule up to its deepest position with an
untried alternative, that alternative, then the first enabled action at each
later point until nothing is enabled or a state explored before is reached
(after a check that ended the request on no rank). Runs are re-executed from
the start on fresh caches; this module only decides and counts (rank 0 of the
launch runs it between schedules).

Counts, per setup, over the graph the runs traversed (states after a check,
edges a segment of local actions and a check): `explored` is the runs;
`classes` the schedules a partial-order reduction alone would run (every path
through the graph); `naive` every interleaving of the ranks' actions, the
number of schedules of the same model without either reduction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from conformance.multirank.explore.model import CHECK, CrossRankScenario, Segment, format_schedule, interleavings


@dataclass(frozen=True)
class Failure:
    """A schedule that failed: the oracle's lines (each naming its clause), and when it was found."""

    schedule: str
    problems: tuple[str, ...]
    passed_before: int  # schedules that passed before it
    after_s: float  # seconds from the exploration's start


@dataclass
class Summary:
    """What an exploration did, as the ranks hand it to the parent."""

    scenario: str
    explored: int = 0
    classes: int = 0
    naive: int = 0
    elapsed_s: float = 0.0
    setups: int = 0
    failures: list[Failure] = field(default_factory=list)


@dataclass(frozen=True)
class Task:
    """One schedule to run: the setup, the actions to take first, what each position enabled before, the states explored."""

    index: int
    setup: tuple[str, ...]
    prefix: tuple[str, ...]
    parent_enabled: tuple[tuple[str, ...], ...] = ()
    visited: frozenset = frozenset()
    exact: bool = False  # a replay: these actions and nothing more, then the finish

    @property
    def text(self) -> str:
        return format_schedule(self.setup, self.prefix)


@dataclass(frozen=True)
class Step:
    """One position of a run, as every rank saw it."""

    enabled: tuple[str, ...]
    state: tuple  # the global state before the action
    action: str


@dataclass(frozen=True)
class RunLog:
    """What one run did: its positions, and the state after its last action."""

    setup: tuple[str, ...]
    steps: tuple[Step, ...]
    final_state: tuple
    cut: bool  # stopped at a state explored before

    @property
    def actions(self) -> tuple[str, ...]:
        return tuple(s.action for s in self.steps)

    @property
    def text(self) -> str:
        return format_schedule(self.setup, self.actions)

    def _after(self, index: int) -> tuple:
        return self.steps[index + 1].state if index + 1 < len(self.steps) else self.final_state

    def post_check_states(self) -> list[tuple[int, tuple]]:
        """(index of the check, the state after it) for each check of the run."""
        return [(i, self._after(i)) for i, s in enumerate(self.steps) if s.action.startswith(CHECK)]

    def edges(self) -> list[tuple[tuple, tuple[str, ...], str, tuple]]:
        """(state after the previous check or at the start, the segment's local actions, the check, the state after it)."""
        out = []
        start = self.steps[0].state if self.steps else self.final_state
        segment: list[str] = []
        for index, step in enumerate(self.steps):
            if not step.action.startswith(CHECK):
                segment.append(step.action)
                continue
            end = self._after(index)
            out.append((start, tuple(segment), step.action, end))
            start, segment = end, []
        return out


@dataclass
class SetupCounts:
    setup: tuple[str, ...]
    explored: int = 0
    edges: dict = field(default_factory=dict)  # (from, segment, check) -> to
    root: tuple | None = None

    def add(self, log: RunLog) -> None:
        self.explored += 1
        if self.root is None:
            self.root = log.steps[0].state if log.steps else log.final_state
        for start, segment, check, end in log.edges():
            self.edges[(start, segment, check)] = end

    def paths(self, world_size: int) -> tuple[int, int]:
        """(classes, naive): paths through the traversed graph, each counted once, and counted by its interleavings."""
        out: dict[tuple, tuple[int, int]] = {}
        by_start: dict[tuple, list[tuple[tuple[str, ...], tuple]]] = {}
        for (start, segment, _check), end in self.edges.items():
            by_start.setdefault(start, []).append((segment, end))

        def count(state: tuple, depth: int = 0) -> tuple[int, int]:
            if state in out:
                return out[state]
            if depth > 10_000:
                raise RecursionError("the explored graph has a cycle")
            classes = naive = 0
            for segment, end in by_start.get(state, []):
                below = count(end, depth + 1)
                classes += below[0]
                naive += interleavings(Segment(segment), world_size) * below[1]
            out[state] = (classes, naive) if by_start.get(state) else (1, 1)
            return out[state]

        return count(self.root) if self.root is not None else (0, 0)


class Search:
    """The schedules of one scenario, depth first, setup by setup (or one schedule, exactly, for a replay)."""

    def __init__(self, scenario: CrossRankScenario, extra_pools: Sequence[str], *, only: str | None = None) -> None:
        from conformance.multirank.explore.model import parse_schedule

        self.scenario = scenario
        self.counts: list[SetupCounts] = []
        self.failures: list[Failure] = []  # each naming a clause no earlier one named (ranks.py keeps them)
        self._index = 0
        self._visited: set = set()
        if only is not None:
            setup, actions = parse_schedule(only, scenario.world_size)
            self._setups = [setup]
            self._first = Task(0, setup, actions, exact=True)
        else:
            self._setups = scenario.setups(extra_pools)
            self._first = Task(0, self._setups[0], ())
        self._setup_at = 0

    def first(self) -> Task:
        self.counts.append(SetupCounts(self._first.setup))
        return self._first

    def next(self, log: RunLog, *, failed: bool = False) -> Task | None:
        """The task after a run (its log up to where it stopped, if it failed); None when the scenario is explored."""
        if failed:
            self.counts[-1].explored += 1  # its graph below the failure was never traversed: counted, not walked
        else:
            self.counts[-1].add(log)
        self._index += 1
        if self._first.exact:
            return None
        self._visited.update(state for _, state in log.post_check_states())
        backtrack = _next_prefix(log)
        if backtrack is not None:
            prefix, parent = backtrack
            return Task(self._index, log.setup, prefix, parent, frozenset(self._visited))
        self._setup_at += 1
        if self._setup_at >= len(self._setups):
            return None
        self._visited = set()
        setup = self._setups[self._setup_at]
        self.counts.append(SetupCounts(setup))
        return Task(self._index, setup, ())

    @property
    def explored(self) -> int:
        return sum(c.explored for c in self.counts)

    def reduction(self) -> tuple[int, int]:
        """(classes, naive) summed over the setups explored so far."""
        totals = [c.paths(self.scenario.world_size) for c in self.counts if c.explored]
        return sum(t[0] for t in totals), sum(t[1] for t in totals)


def _next_prefix(log: RunLog) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]] | None:
    """The deepest position with an untried alternative: the actions up to it plus that alternative."""
    steps = log.steps
    for index in range(len(steps) - 1, -1, -1):
        options = steps[index].enabled
        position = options.index(steps[index].action)
        if position + 1 < len(options):
            return tuple(s.action for s in steps[:index]) + (options[position + 1],), tuple(s.enabled for s in steps[: index + 1])
    return None
