"""The smallest exploration schedule that still fails the defect's clause, found as Hypothesis shrinks.

A schedule is smaller when it runs fewer actions, then when its actions come
earlier in the explorer's order (io, check, tick, abort). From the failing
schedule, candidates are tried smallest first: one action left out, one
action replaced by an earlier one, a prefix (replay completes a prefix with
the first enabled action at each point); the first candidate that replays,
fails naming the clause and ran a smaller schedule is taken, and the search
starts again from it, within a budget of replays. A candidate naming actions
that are not enabled, or a replay that is not deterministic, is skipped.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from conformance.scenarios.explore import ACTIONS, NondeterminismError, ReplayError, format_schedule, parse_schedule, replay

from conformance.scenarios.catalogue import Scenario
from conformance.repro.runtime import failure_text, quiet_threads, reproduces
from conformance.repro.standalone import CacheFactory

MAX_REPLAYS = 60
MAX_SECONDS = 90.0


@dataclass(frozen=True)
class Shrunk:
    schedule: str  # the whole schedule the smallest failing run executed
    message: str  # its failure
    replays: int  # replays the search ran


def size(actions: Sequence[str]) -> tuple[int, list[int]]:
    return len(actions), [ACTIONS.index(a) for a in actions]


def candidates(actions: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    """Smaller schedules to try, the smallest kinds of change first."""
    seen = {actions}
    for index in range(len(actions)):
        yield from _new(actions[:index] + actions[index + 1:], seen)
    for index, action in enumerate(actions):
        for earlier in ACTIONS[: ACTIONS.index(action)]:
            yield from _new(actions[:index] + (earlier,) + actions[index + 1:], seen)
    for end in range(len(actions) - 1, 0, -1):
        yield from _new(actions[:end], seen)


def _new(candidate: tuple[str, ...], seen: set) -> Iterator[tuple[str, ...]]:
    if candidate not in seen:
        seen.add(candidate)
        yield candidate


def run(adapter: Any, scenario: Scenario, actions: Sequence[str]) -> tuple[tuple[str, ...], str | None] | None:
    """(the schedule executed, its failure or None); None when the candidate does not replay."""
    with quiet_threads():
        factory = CacheFactory(adapter)
        try:
            result = replay(factory, scenario, tuple(actions), profile=factory.profile)
        except (ReplayError, NondeterminismError):
            _close(factory)
            return None
        except BaseException as exc:
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            _close(factory)
            return tuple(getattr(exc, "_explore_schedule", actions)), failure_text(exc)
        _close(factory)
        return result.schedule, None


def _close(factory: CacheFactory) -> None:
    try:
        factory.close()
    except BaseException:
        pass  # the replay's verdict is what counts here


def shrink(adapter: Any, scenario: Scenario, schedule: str, clause: str, *, max_replays: int = MAX_REPLAYS,
           max_seconds: float = MAX_SECONDS, clock: Callable[[], float] = time.monotonic) -> Shrunk | None:
    """The smallest schedule of `scenario` failing `clause`, from `schedule`; None when `schedule` itself does not."""
    first = run(adapter, scenario, parse_schedule(schedule))
    if first is None or not reproduces(first[1], clause):
        return None
    best, message = first[0], first[1] or ""
    replays, deadline = 1, clock() + max_seconds
    improved = True
    while improved and replays < max_replays and clock() < deadline:
        improved = False
        for candidate in candidates(best):
            if replays >= max_replays or clock() >= deadline:
                break
            replays += 1
            outcome = run(adapter, scenario, candidate)
            if outcome is None or not reproduces(outcome[1], clause) or size(outcome[0]) >= size(best):
                continue
            best, message, improved = outcome[0], outcome[1] or "", True
            break
    return Shrunk(format_schedule(best), message, replays)
