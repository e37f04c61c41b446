"""What every reproduction script runs: its options, building each target, the verdict and the exit status.

A script lists its targets (an implementation and the function that replays
the defect on it) and calls main(). Exit status:

  0  the defect did not reproduce on any target (each replay passed, or the
     implementation no longer runs the schedule that failed)
  1  it reproduced on a target: an assertion names the defect's clause
  2  a target could not be built (bad path, factory or environment)
  3  it did not reproduce, but a replay failed otherwise (another clause, an error)

Options replace where the implementation comes from, for every target:
`--cache-impl package.module:factory`, `--sglang-live PATH`, `--sglang PATH`
(a live or checkout target keeps its class name); `--only NAME` runs one.
"""

from __future__ import annotations

import argparse
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Sequence

from conformance.scenarios.explore import ReplayError
from conformance.report.failures import named_clauses
from conformance.repro.standalone import CacheFactory, load_adapter
from spec.clauses import CATALOGUE

Replay = Callable[[CacheFactory], None]
GONE, REPRODUCED, NOT_BUILT, OTHER = 0, 1, 2, 3


@contextmanager
def quiet_threads() -> Iterator[list[str]]:
    """Background threads' uncaught exceptions, collected instead of printed (a replay reports what they broke)."""
    seen: list[str] = []
    previous = threading.excepthook
    threading.excepthook = lambda args: seen.append(f"{args.thread.name if args.thread else '?'}: {args.exc_type.__name__}: {args.exc_value}")
    try:
        yield seen
    finally:
        threading.excepthook = previous


def failure_text(exc: BaseException) -> str:
    """An assertion's message as it reads ("D5: ..."); another exception with its type first."""
    return str(exc) if isinstance(exc, AssertionError) else f"{type(exc).__name__}: {exc}"


@dataclass(frozen=True)
class Replayed:
    failure: str | None  # the failure's message; None: the replay passed
    unreachable: str | None = None  # the schedule is not one the implementation runs any more (explore.ReplayError)


def replay_once(adapter: Any, replay: Replay) -> Replayed:
    """Run one replay on a fresh factory, then close it as the suite's teardown does."""
    with quiet_threads():
        factory = CacheFactory(adapter)
        try:
            replay(factory)
        except BaseException as exc:  # an assertion, an error, or a skip an adapter raises outside pytest
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            try:
                factory.close()
            except BaseException:
                pass  # the replay's own failure is the one to report
            # An implementation that no longer offers the schedule's next action cannot run the schedule that failed.
            return Replayed(None, failure_text(exc)) if isinstance(exc, ReplayError) else Replayed(failure_text(exc))
        try:
            factory.close()
        except AssertionError as exc:
            return Replayed(failure_text(exc))
    return Replayed(None)


def reproduces(message: str | None, clause: str) -> bool:
    return message is not None and clause in named_clauses(message)


def verdict_line(name: str, clause: str, replayed: Replayed) -> tuple[int, str]:
    c = CATALOGUE[clause]
    message = replayed.failure
    if message is None and replayed.unreachable:
        return GONE, f"{name}: {clause} did not reproduce: the implementation no longer runs the schedule ({replayed.unreachable})"
    if message is None:
        return GONE, f"{name}: {clause} did not reproduce: the replay passed"
    if reproduces(message, clause):
        return REPRODUCED, f"{name}: REPRODUCED {clause} ({c.kind.value}: {c.title}): {named_clauses(message)[clause]}"
    first = " ".join(message.split())[:400]
    return OTHER, f"{name}: {clause} did not reproduce, but the replay failed otherwise: {first}"


def _parser(doc: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=doc.strip().splitlines()[0] if doc.strip() else None)
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--cache-impl", metavar="MODULE:FACTORY", help="run this adapter instead of the one the run tested")
    where.add_argument("--sglang-live", metavar="PATH", help="build the same class from this SGLang tree")
    where.add_argument("--sglang", metavar="PATH", help="run the same class's decision code from this SGLang checkout")
    parser.add_argument("--only", metavar="NAME", help="replay on this target only (its name as listed)")
    return parser


def _source(implementation: Mapping[str, str], options: argparse.Namespace) -> dict[str, str | None]:
    for key in ("cache_impl", "sglang_live", "sglang"):
        if getattr(options, key):
            return {key: getattr(options, key), "name": None if key == "cache_impl" else implementation.get("name")}
    return dict(implementation)


def main(clause: str, targets: Sequence[tuple[str, Mapping[str, str], Replay]], argv: Sequence[str] | None = None, doc: str = "") -> int:
    options = _parser(doc).parse_args(argv)
    chosen = [t for t in targets if options.only in (None, t[0])]
    if not chosen:
        print(f"--only: {options.only!r} (accepted: {', '.join(t[0] for t in targets)})", file=sys.stderr)
        return NOT_BUILT
    statuses = []
    for name, implementation, replay in chosen:
        source = _source(implementation, options)
        try:
            adapter = load_adapter(**source)
        except BaseException as exc:  # a bad path, factory or environment: one line, never a traceback
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            print(f"{name}: could not be built from {source}: {' '.join(str(exc).split())}", file=sys.stderr)
            statuses.append(NOT_BUILT)
            continue
        status, line = verdict_line(adapter.name, clause, replay_once(adapter, replay))
        print(line)
        statuses.append(status)
    for status in (REPRODUCED, NOT_BUILT, OTHER):
        if status in statuses:
            return status
    return GONE
