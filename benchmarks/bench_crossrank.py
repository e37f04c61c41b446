"""The cross-rank explorer: schedules per second, its reduction against naive enumeration, time to each first counterexample.

    python benchmarks/bench_crossrank.py [--impl hiradix] [--scenarios NAME,...] [--variants NAME,...] [--goal-s 120]

Part 1 explores each scenario exhaustively (default: the catalogue's bench/...:
two ranks, two KV batches of one page, the indexer as the one sidecar pool,
one storage fault or one rank-local abort) on a built-in implementation and
prints the schedules it ran, the wall time, schedules per second, and two
counts over the same model: the schedules a partial-order reduction alone
runs (one per class of interleavings that differ only in the order of
different ranks' actions between two checks) and the naive enumeration
(every interleaving), each with its ratio to the schedules run. Goal: each
scenario exhaustively within --goal-s seconds.

Part 2 explores, for each cross-rank known-bad variant (caches/variants/),
the suite scenario that kills it, and prints the time to the first
counterexample (into the exploration when rank 0's judge finds it; the
launch's whole wall time when it is a hang), the schedules before it, and
the clauses its failures name against the ones the variant's docstring
promises.

Every exploration is one launch of real ranks (gloo on CPU), its processes
kept alive across schedules. Exit status 1 when a scenario misses the goal or
a variant survives or is not named by its clause. Not a test: the suite's own
tests never time themselves.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BENCH = ("bench/fault/wait_complete", "bench/abort/wait_complete", "bench/fault/timeout", "bench/abort/timeout")
# Each cross-rank variant, with the suite scenario that kills it.
VARIANTS = {
    "drain_skipped_when_idle": "landed/best_effort",
    "state_attached_locally": "landed/best_effort",
    "sidecar_hit_unreduced": "landed/best_effort",
    "window_agreed_locally": "landed/best_effort",
    "payload_drops_terminated": "fault/wait_complete",
    "vote_over_attn_tp_only": "groups/wait_complete",
    "extra_vote_on_one_group": "groups/wait_complete",
}


def explore_builtin(impl: str, scenario: str, factory_module: str) -> tuple[object | None, str | None, float]:
    """(the exploration, the failure message, wall seconds) of one scenario on one adapter."""
    import importlib

    from conformance.multirank.explore import SCENARIOS, CrossRankExplorationError, explore

    adapter = getattr(importlib.import_module(factory_module), impl)()
    started = time.perf_counter()
    try:
        result = explore(adapter, SCENARIOS[scenario], workdir=Path(tempfile.mkdtemp(prefix="bench-crossrank-")),
                         source=["--cache-impl", f"{factory_module}:{impl}"], total_timeout_s=3600)
    except CrossRankExplorationError as exc:
        return exc, str(exc), time.perf_counter() - started
    return result, None, time.perf_counter() - started


def part1(impl: str, scenarios: list[str], goal_s: float) -> bool:
    print(f"## exhaustive exploration, {impl} (load {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores)\n")
    print("| scenario | setups | schedules run | wall (s) | schedules/s | POR alone | naive | naive / run | goal |")
    print("|---|---|---|---|---|---|---|---|---|")
    ok = True
    for name in scenarios:
        result, failure, wall = explore_builtin(impl, name, "caches.adapters")
        if failure is not None:
            print(f"| {name} | | failed: {failure.splitlines()[0][:120]} | {wall:.1f} | | | | | |")
            ok = False
            continue
        met = wall <= goal_s
        ok &= met
        print(f"| {name} | {result.setups} | {result.explored} | {wall:.1f} | {result.per_second:.1f} | {result.classes} "
              f"({result.classes / result.explored:.1f}x) | {result.naive} | {result.ratio:.1f}x | "
              f"{'met' if met else 'missed'} (<= {goal_s:g} s) |", flush=True)
    return ok


def part2(variants: list[str]) -> bool:
    from caches.variants import EXPECTED_FAILURES
    from conformance.report.failures import named_clauses

    print(f"\n## time to the first counterexample (load {os.getloadavg()[0]:.2f})\n")
    print("| variant | scenario | first counterexample (s) | wall (s) | schedules before it | clauses named | promised | schedule |")
    print("|---|---|---|---|---|---|---|---|")
    ok = True
    for variant in variants:
        scenario = VARIANTS[variant]
        error, failure, wall = explore_builtin(variant, scenario, "caches.variants")
        promised = EXPECTED_FAILURES[variant]
        if failure is None:
            print(f"| {variant} | {scenario} | | {wall:.1f} | survived ({error.explored} schedules) | | {', '.join(promised)} | |")
            ok = False
            continue
        named = sorted(named_clauses(failure))
        killed = set(promised) <= set(named)
        ok &= killed
        # Found by rank 0's judge: seconds into the exploration; a hang: the whole launch, up to the report of it.
        first = error.first_after_s if error.first_after_s else wall
        print(f"| {variant} | {scenario} | {first:.1f} | {wall:.1f} | {error.explored} | {', '.join(named) or 'none'} | "
              f"{', '.join(promised)}{'' if killed else ' (not all named)'} | `{error.schedule}` |", flush=True)
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--impl", default="hiradix", help="the built-in implementation of part 1 (caches.adapters)")
    parser.add_argument("--scenarios", default=",".join(BENCH), help="part 1's scenarios, comma-separated ('' for none)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="part 2's variants, comma-separated ('' for none)")
    parser.add_argument("--goal-s", type=float, default=120.0, help="seconds within which each scenario must explore exhaustively")
    args = parser.parse_args()
    from conformance.multirank.explore import SCENARIOS

    scenarios = [s for s in args.scenarios.split(",") if s]
    variants = [v for v in args.variants.split(",") if v]
    for name in scenarios:
        if name not in SCENARIOS:
            parser.error(f"invalid --scenarios entry: {name!r} (accepted: {', '.join(SCENARIOS)})")
    for name in variants:
        if name not in VARIANTS:
            parser.error(f"invalid --variants entry: {name!r} (accepted: {', '.join(VARIANTS)})")
    ok = part1(args.impl, scenarios, args.goal_s) if scenarios else True
    ok = (part2(variants) if variants else True) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
