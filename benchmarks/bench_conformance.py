"""Wall time of the conformance suite, serial (-n 0) against parallel (-n auto), in one run.

    python benchmarks/bench_conformance.py [--repeats 1] [-- extra pytest args]

Runs `python -m pytest conformance/ -q -p no:cacheprovider` both ways, alternating,
and prints the median wall seconds of each and their ratio, with the
machine's one-minute load average before each run (other work on a shared
machine slows both sides, unevenly). Not a test: the suite's own tests never
time themselves.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(workers: str, extra: list[str]) -> tuple[float, int, str]:
    cmd = [sys.executable, "-m", "pytest", "conformance/", "-q", "-p", "no:cacheprovider", "-n", workers, *extra]
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr.strip()[-200:]
    return elapsed, done.returncode, summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("extra", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"invalid --repeats: {args.repeats} (accepted: an integer >= 1)")
    times: dict[str, list[float]] = {"0": [], "auto": []}
    for _ in range(args.repeats):
        for workers in ("0", "auto"):
            load = os.getloadavg()[0]
            elapsed, code, summary = run(workers, args.extra)
            times[workers].append(elapsed)
            print(f"-n {workers:<4} {elapsed:7.1f}s  load {load:4.2f}  exit {code}  {summary}", flush=True)
    serial, parallel = statistics.median(times["0"]), statistics.median(times["auto"])
    print()
    print(f"cores: {os.cpu_count()}")
    print(f"| run | wall (s) |\n|---|---|\n| -n 0 | {serial:.1f} |\n| -n auto | {parallel:.1f} |")
    print(f"speed-up -n auto vs -n 0: {serial / parallel:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
