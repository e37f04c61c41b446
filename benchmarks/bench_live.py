"""Where a --sglang-live run's time goes, for one row on one target, and what building upstream's cache costs.

    VENV/bin/python benchmarks/bench_live.py --sglang-live TREE@LABEL --row HiRadixCache [--builds 5]

Two measurements, both in this run:

1. The raw operation: building and closing one upstream cache of the row
   (its constructor runs RadixCache.reset, whose joins of the storage
   threads wait out their 1 s queue poll unless woken), timed in a child
   process with the prompt-reset shim and with upstream's reset as it is.
2. The row's whole suite (`pytest conformance/ -n 2 -k <row>`): its wall time,
   and the seconds its tests spend, summed per test module (`--durations=0`),
   so the modules that dominate are named.

Prints a table; exits 0 (a measurement, no goal to fail: the figure and its
command go to docs/performance.md).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, {repo!r})
from conformance.adapter import CacheEnv
from conformance.live import runtime
from conformance.live.adapter import adapters_for
from conformance.live.tree import locate
from spec.clock import ManualClock
from spec.config import TerminationConfig
from spec.trace import TraceRecorder

tree = locate({target!r})
run = runtime.load(tree)
cls = run.module("cache_controller").HiCacheController
if {raw!r} and hasattr(cls.reset, "__wrapped__"):
    cls.reset = cls.reset.__wrapped__  # upstream's reset as it is
adapter = next(a for a in adapters_for(tree) if a.name.split(":", 1)[1].rpartition("@")[0] == {row!r})
times = []
for _ in range({builds}):
    with tempfile.TemporaryDirectory() as storage:
        clock = ManualClock(1000.0)
        env = CacheEnv(device="cpu", termination=TerminationConfig(policy="wait_complete", page_size=adapter.page_size or 4),
                       storage_dir=Path(storage), clock=clock, trace=TraceRecorder(clock), extra_pools=tuple(adapter.default_extra_pools))
        started = time.perf_counter()
        adapter.create(env).close()
        times.append(time.perf_counter() - started)
print(json.dumps(sorted(times)[len(times) // 2]))
"""


def build_time(target: str, row: str, builds: int, raw: bool) -> float:
    code = CHILD.format(repo=str(REPO), target=target, row=row, builds=builds, raw=raw)
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def suite(target: str, row: str) -> tuple[float, dict[str, float], str]:
    selection = f"sglang and {row.replace('+', ' and ')}" if "+" in row else f"sglang and {row} and not dsa"
    command = [sys.executable, "-m", "pytest", "conformance/", "-n", "2", "-q", "-p", "no:randomly", "--sglang-live", target,
               "-k", selection, "--durations=0"]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - started
    per_module: dict[str, float] = defaultdict(float)
    for line in done.stdout.splitlines():
        found = re.match(r"^([0-9.]+)s (?:call|setup|teardown)\s+(conformance/\S+?\.py)::", line)
        if found:
            per_module[found.group(2)] += float(found.group(1))
    summary = next((line for line in reversed(done.stdout.splitlines()) if " in " in line and ("passed" in line or "failed" in line)), "")
    return wall, dict(per_module), summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sglang-live", required=True, dest="target")
    parser.add_argument("--row", required=True, help="a row of the target, e.g. HiRadixCache, HiRadixCache+dsa")
    parser.add_argument("--builds", type=int, default=5)
    args = parser.parse_args()
    shimmed, raw = build_time(args.target, args.row, args.builds, False), build_time(args.target, args.row, args.builds, True)
    wall, per_module, summary = suite(args.target, args.row)
    print(f"| measure | {args.row} on {args.target.rpartition('@')[2]} |")
    print("|---|---|")
    print(f"| build and close one cache (median of {args.builds}) | {shimmed:.3f} s with prompt-reset; {raw:.3f} s as upstream resets ({raw / shimmed:.1f}x) |")
    print(f"| the row's suite, `-n 2` | {wall:.0f} s wall ({summary.strip('= ')}) |")
    for module, seconds in sorted(per_module.items(), key=lambda kv: -kv[1])[:5]:
        print(f"| {module} | {seconds:.0f} s of test time |")
    print(json.dumps({"build_s": shimmed, "build_raw_s": raw, "suite_wall_s": wall, "per_module_s": per_module}), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
