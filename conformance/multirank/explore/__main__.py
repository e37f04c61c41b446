"""Explore a cross-rank scenario, or replay one of its schedules, outside pytest.

    python -m conformance.multirank.explore --cache-impl caches.adapters:hiradix --scenario abort/wait_complete
    python -m conformance.multirank.explore --sglang-live TREE --name HiRadixCache --scenario abort/wait_complete --schedule abort1,check

Exit status: 0 every schedule passed, 1 a schedule failed (the lines name the
clauses), 2 bad options, an implementation that could not be built, or a
schedule it does not run.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Sequence

from conformance.multirank.explore.catalogue import SCENARIOS
from conformance.multirank.explore.run import CrossRankExplorationError, CrossRankReplayError, explore


def _source(options: argparse.Namespace) -> tuple[dict, list[str]]:
    """load_adapter's arguments, and the same as command-line options (for the replay line)."""
    if options.cache_impl:
        return {"cache_impl": options.cache_impl}, ["--cache-impl", options.cache_impl]
    if options.sglang_live:
        name = ["--name", options.name] if options.name else []
        return {"sglang_live": options.sglang_live, "name": options.name}, ["--sglang-live", options.sglang_live, *name]
    return {}, []


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--cache-impl", metavar="MODULE:FACTORY", help="the adapter factory of the implementation")
    where.add_argument("--sglang-live", metavar="PATH", help="an SGLang tree: its live cache classes")
    parser.add_argument("--name", help="which implementation of the tree (its class, e.g. HiRadixCache)")
    parser.add_argument("--scenario", required=True, help="a scenario of the catalogue: " + ", ".join(SCENARIOS))
    parser.add_argument("--schedule", help="replay this schedule alone (the text a failure printed)")
    parser.add_argument("--workdir", type=Path, help="where the ranks keep their files (default: a temporary folder)")
    options = parser.parse_args(argv)
    if options.scenario not in SCENARIOS:
        print(f"--scenario: {options.scenario!r} (accepted: {', '.join(SCENARIOS)})", file=sys.stderr)
        return 2
    from conformance.repro.standalone import load_adapter

    loaded, source = _source(options)
    try:
        adapter = load_adapter(**loaded)
    except Exception as exc:  # a bad path, factory or environment: one line
        print(f"the implementation could not be built from {loaded}: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    scenario = SCENARIOS[options.scenario]
    workdir = options.workdir or Path(tempfile.mkdtemp(prefix="crossrank-"))
    try:
        result = explore(adapter, scenario, workdir=workdir, source=source, only=options.schedule,
                         cli_specs=[options.cache_impl] if options.cache_impl else ())
    except CrossRankReplayError as exc:  # the schedule asks for an action the implementation does not enable there
        print(f"--schedule: {options.schedule!r} is not a schedule {adapter.name} runs: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except CrossRankExplorationError as exc:
        print(exc)
        return 1
    print(f"{adapter.name}: {scenario.name}: {result.explored} schedules passed in {result.elapsed_s:.1f}s "
          f"({result.per_second:.1f}/s); without the reduction {result.naive} ({result.ratio:.1f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
