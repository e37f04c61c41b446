"""Benchmark: hicache-lint against the stdlib parse floor and Fixit 2, in one run.

    python benchmarks/bench_lint.py [--checkout DIR] [--processes-only] [--files N] [--keep DIR]
                                    [--repeat K] [--skip-fixit] [--fixit-serial]

1. Whole processes (interpreter start and imports included), each the median of
   --repeat runs, interleaved: on the guard-bearing files (every .py file under
   the checkout's python/ that mentions `pool_transfers`; at SGLang 9e9fde147
   there are 8) and on a 120-file tree of them (copies in a temporary folder;
   without --checkout, generated cache modules stand in), it times
     * the floor: a process that imports libcst and `ast.parse`s the same files,
     * `python -m lint FILES` (text output), and `python -m lint --version`,
     * Fixit 2's CLI with benchmarks/fixit_rules/guard_missing.py as its only rule,
   and prints ours / floor and fixit / ours.
2. A generated tree (mostly unrelated code, some cache classes, a few without
   the guard): hicache-lint in process (lint.api.lint_paths) and as a CLI,
   Fixit 2 in process (its default process pool; serial too with
   --fixit-serial) and as a CLI; checks both report the same guard-less
   methods; prints files/s, lines/s and the throughput ratio ours / fixit.

The checkout is only read; nothing of it is kept.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[1]
FIXIT_RULES = Path(__file__).resolve().parent / "fixit_rules"
sys.path.insert(0, str(REPO))

WORDS = ("alpha beta gamma delta block page slot token request batch node tree host device "
         "cache pool queue stream event buffer index shard rank group policy stats").split()

CACHE_GUARDED = '''

class {cls}:
    def __init__(self, page_size, policy, tp_group, reducer):
        self.page_size = page_size
        self.prefetch_stop_policy = policy
        self.tp_group = tp_group
        self.reducer = reducer
        self.timeout_base, self.timeout_per_ki, self.timeout_max = 2.0, 0.1, 30.0

    def start_prefetch(self, request, host_indices, pool_transfers):
        return self.controller.prefetch(request, host_indices, extra_pools=pool_transfers)

    def _timeout(self, {op}):
        tokens = len({op}.hash_value) * self.page_size
        return min(self.timeout_max, self.timeout_base + self.timeout_per_ki * tokens / 1024)

    def can_terminate_prefetch(self, {op}):
        can_terminate = True
        if self.prefetch_stop_policy == "best_effort":
            return can_terminate
        if len({op}.hash_value) == 0:
            {pred} = False
        else:
            {pred} = {op}.completed_tokens == len({op}.hash_value) * self.page_size
{guard}
        if self.prefetch_stop_policy == "wait_complete":
            can_terminate = {pred}
        elif self.prefetch_stop_policy == "timeout":
            can_terminate = {pred} or time.monotonic() - {op}.start_time > self._timeout({op})
        terminated = {op}.is_terminated()
        vote_no, any_terminated = self.reducer.all_reduce_max(
            [1 - int(can_terminate), int(terminated)], name="prefetch_terminate"
        )
        return vote_no == 0 or any_terminated == 1
'''
GUARDS = (
    '        if {pred} and getattr({op}, "pool_transfers", None) and not getattr({op}, "pool_transfers_done", True):\n'
    "            {pred} = False",
    "        if {pred} and {op}.pool_transfers and not {op}.pool_transfers_done:\n            {pred} = False",
    "        # the guard was dropped here",
)


def _name(rng: random.Random, prefix: str = "") -> str:
    return prefix + "_".join(rng.sample(WORDS, 2))


def _function(rng: random.Random, name: str, indent: str, method: bool) -> list[str]:
    args = ["self"] if method else []
    args += [_name(rng) for _ in range(rng.randint(1, 3))]
    lines = [f"{indent}def {name}({', '.join(args)}):", f'{indent}    """{" ".join(rng.sample(WORDS, 5))}."""']
    local = args[-1]
    for _ in range(rng.randint(4, 12)):
        kind = rng.randrange(6)
        target = _name(rng, "v_")
        if kind == 0:
            lines.append(f"{indent}    {target} = [{local} * {rng.randint(1, 9)} for _ in range({rng.randint(2, 64)})]")
        elif kind == 1:
            lines += [f"{indent}    if {local} is not None and {rng.randint(0, 9)} > {rng.randint(0, 9)}:",
                      f"{indent}        {target} = {{'{rng.choice(WORDS)}': {local}}}",
                      f"{indent}    else:", f"{indent}        {target} = None"]
        elif kind == 2:
            lines += [f"{indent}    for {target} in range({rng.randint(1, 100)}):",
                      f"{indent}        {local} = ({local}, {target})"]
        elif kind == 3:
            lines.append(f"{indent}    {target} = sum(len(str(x)) for x in ({local}, {rng.randint(0, 999)}))")
        elif kind == 4:
            lines += [f"{indent}    try:", f"{indent}        {target} = int({local})",
                      f"{indent}    except (TypeError, ValueError):", f"{indent}        {target} = 0"]
        else:
            lines.append(f"{indent}    {target} = {local!s}  # {rng.choice(WORDS)} {rng.choice(WORDS)}")
        local = target
    lines.append(f"{indent}    return {local}")
    return lines


def unrelated_module(rng: random.Random, target_lines: int) -> str:
    lines = [f'"""{" ".join(rng.sample(WORDS, 6))}."""', "import os", "import time", ""]
    while len(lines) < target_lines:
        if rng.random() < 0.6:
            lines += ["", "", f"class {_name(rng).title().replace('_', '')}{rng.randint(0, 999)}:"]
            for _ in range(rng.randint(2, 5)):
                lines += [""] + _function(rng, _name(rng, "m_"), "    ", True)
        else:
            lines += ["", ""] + _function(rng, _name(rng, "f_"), "", False)
    return "\n".join(lines) + "\n"


def cache_module(rng: random.Random, index: int, guard_kind: int) -> str:
    op = rng.choice(["operation", "op", "prefetch_op"])
    pred = rng.choice(["completed", "is_done", "kv_complete"])
    guard = GUARDS[guard_kind].format(op=op, pred=pred)
    head = unrelated_module(rng, 120)
    cache = CACHE_GUARDED.format(cls=f"Cache{index}", op=op, pred=pred, guard=guard)
    return head + cache + unrelated_module(rng, 80).split("\n", 4)[-1]


def generate_tree(root: Path, files: int, seed: int = 20240601) -> dict:
    """Write the tree; returns counts and the guard-less methods planted."""
    rng = random.Random(seed)
    caches = max(files // 25, 3)
    guardless: set[tuple[str, int]] = set()
    lines = 0
    for i in range(files):
        package = root / f"pkg{i % 20:02d}"
        package.mkdir(parents=True, exist_ok=True)
        if i < caches:
            text = cache_module(rng, i, i % 3)
            path = package / f"cache_{i:04d}.py"
            if i % 3 == 2:
                def_line = next(n for n, line in enumerate(text.splitlines(), 1)
                                if line.startswith("    def can_terminate_prefetch("))
                guardless.add((str(path.resolve()), def_line))
        elif i % 50 == 7:  # callers mention the method name: they pass the text prefilter
            text = unrelated_module(rng, 150) + "\n\ndef poll(cache, op):\n    return cache.can_terminate_prefetch(op)\n"
            path = package / f"caller_{i:04d}.py"
        else:
            text = unrelated_module(rng, rng.randint(120, 300))
            path = package / f"mod_{i:04d}.py"
        path.write_text(text)
        lines += text.count("\n")
    return {"files": files, "lines": lines, "caches": caches, "guardless": guardless}


def timed(fn: Callable[[], object], repeat: int) -> tuple[float, object]:
    best, value = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        value = fn()
        best = min(best, time.perf_counter() - start)
    return best, value


def run_ours_api(tree: Path):
    from lint.api import lint_paths
    from lint.config import Config

    result = lint_paths([tree], Config(root=tree), allow_empty=True)
    return {(str(Path(f.path).resolve()), f.line) for f in result.findings if f.code == "HC101"}


def run_ours_cli(tree: Path):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "lint", "--format", "json", str(tree)],
                          cwd=tree, env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"hicache-lint CLI failed ({proc.returncode}): {proc.stderr}")
    return proc.stdout.count('"code": "HC101"')


def run_fixit_api(tree: Path, parallel: bool):
    from fixit.api import fixit_paths
    from fixit.config import parse_rule
    from fixit.ftypes import Options

    options = Options(rules=[parse_rule(".guard_missing", FIXIT_RULES)])
    found = set()
    for result in fixit_paths([tree], options=options, parallel=parallel):
        if result.error:
            raise RuntimeError(f"fixit failed on {result.path}: {result.error[0]}")
        if result.violation:
            found.add((str(Path(result.path).resolve()), result.violation.range.start.line))
    return found


def run_fixit_cli(tree: Path):
    proc = subprocess.run([sys.executable, "-m", "fixit", "--rules", ".guard_missing", "lint", str(tree)],
                          cwd=FIXIT_RULES, capture_output=True, text=True, timeout=1800)
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"fixit CLI failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return proc.stdout.count("GuardMissing")


FLOOR = "import libcst, ast, sys\nfor f in sys.argv[1:]:\n    ast.parse(open(f, 'rb').read())\n"


def guard_bearing(checkout: Path) -> list[Path]:
    base = checkout / "python" if (checkout / "python").is_dir() else checkout
    return sorted(p for p in base.rglob("*.py") if b"pool_transfers" in p.read_bytes())


def generated_guard_bearing(folder: Path, count: int, seed: int = 20240601) -> list[Path]:
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        path = folder / f"cache_{i:04d}.py"
        path.write_text(cache_module(rng, i, i % 2))  # every one guarded (upstream's two spellings)
        paths.append(path)
    return paths


def copied_tree(files: list[Path], folder: Path, count: int) -> list[Path]:
    paths = []
    for i in range(count):
        target = folder / f"pkg{i // len(files):02d}" / files[i % len(files)].name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(files[i % len(files)], target)
        paths.append(target)
    return paths


def process_seconds(command: list[str], cwd: Path) -> float:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=1800)
    seconds = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"{command[:4]} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return seconds


def compare_processes(label: str, files: list[Path], repeat: int, fixit: bool) -> None:
    names = [str(f) for f in files]
    commands = {
        "floor: import libcst, ast.parse": [sys.executable, "-c", FLOOR, *names],
        "hicache-lint FILES": [sys.executable, "-m", "lint", *names],
        "hicache-lint --version": [sys.executable, "-m", "lint", "--version"],
    }
    runs: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(repeat):  # interleaved, so that a busy moment falls on every command alike
        for name, command in commands.items():
            runs[name].append(process_seconds(command, REPO))
    median = {name: statistics.median(values) for name, values in runs.items()}
    if fixit:
        fixit_command = [sys.executable, "-m", "fixit", "--rules", ".guard_missing", "lint", *names]
        median["fixit 2 CLI (guard_missing rule)"] = process_seconds(fixit_command, FIXIT_RULES)
    lines = sum(f.read_bytes().count(b"\n") for f in files)
    print(f"\n{label}: {len(files)} files, {lines} lines; whole processes, median of {repeat}")
    width = max(len(name) for name in median)
    for name, seconds in median.items():
        print(f"  {name:<{width}}  {seconds:7.3f} s")
    ours, floor = median["hicache-lint FILES"], median["floor: import libcst, ast.parse"]
    print(f"  ours / floor: {ours / floor:.2f}x (goal <= 1.5x)")
    if fixit:
        print(f"  fixit / ours: {median['fixit 2 CLI (guard_missing rule)'] / ours:.1f}x")


def processes(args: argparse.Namespace, workdir: Path) -> None:
    if args.checkout is not None:
        files = guard_bearing(args.checkout)
        if not files:
            raise SystemExit(f"--checkout {args.checkout}: no .py file mentions pool_transfers there")
        source = f"guard-bearing files of {args.checkout}"
        tree = copied_tree(files, workdir / "copies", 120)
    else:
        files = generated_guard_bearing(workdir / "eight", 8)
        source = "8 generated guard-bearing cache modules (pass --checkout for SGLang's own)"
        tree = generated_guard_bearing(workdir / "tree120", 120)
    compare_processes(source, files, args.repeat, not args.skip_fixit)
    compare_processes("a 120-file tree of them", tree, args.repeat, not args.skip_fixit)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkout", type=Path, help="an SGLang checkout (or its python/ folder), only read")
    parser.add_argument("--processes-only", action="store_true", help="skip the generated-tree section")
    parser.add_argument("--files", type=int, default=1100)
    parser.add_argument("--repeat", type=int, default=3, help="runs of our linter (best is kept)")
    parser.add_argument("--keep", type=Path, help="generate into this directory and keep it")
    parser.add_argument("--skip-fixit", action="store_true")
    parser.add_argument("--fixit-serial", action="store_true",
                        help="also time Fixit in process without its process pool")
    args = parser.parse_args(argv)

    workdir = args.keep or Path(tempfile.mkdtemp(prefix="bench_lint_"))
    tree = workdir / "tree"
    for folder in (tree, workdir / "copies", workdir / "eight", workdir / "tree120"):
        shutil.rmtree(folder, ignore_errors=True)
    try:
        print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}, Python {sys.version.split()[0]}")
        processes(args, workdir)
        if args.processes_only:
            return 0
        print()
        info = generate_tree(tree, args.files)
        print(f"tree: {info['files']} files, {info['lines']} lines, {info['caches']} cache classes, "
              f"{len(info['guardless'])} without the guard; {os.cpu_count()} CPUs")
        rows = []
        seconds, found = timed(lambda: run_ours_api(tree), args.repeat)
        assert found == info["guardless"], f"ours found {len(found)}, planted {len(info['guardless'])}"
        rows.append(("hicache-lint (in-process API)", seconds))
        seconds, count = timed(lambda: run_ours_cli(tree), args.repeat)
        assert count == len(info["guardless"]), count
        rows.append(("hicache-lint (CLI, incl. interpreter start)", seconds))
        if not args.skip_fixit:
            seconds, found = timed(lambda: run_fixit_api(tree, parallel=True), 1)
            assert found == info["guardless"], f"fixit found {len(found)}, planted {len(info['guardless'])}"
            rows.append(("fixit 2 (in-process API, parallel)", seconds))
            if args.fixit_serial:
                seconds, found = timed(lambda: run_fixit_api(tree, parallel=False), 1)
                assert found == info["guardless"]
                rows.append(("fixit 2 (in-process API, serial)", seconds))
            seconds, count = timed(lambda: run_fixit_cli(tree), 1)
            assert count == len(info["guardless"]), count
            rows.append(("fixit 2 (CLI)", seconds))
        width = max(len(name) for name, _ in rows)
        print(f"{'tool':<{width}}  {'seconds':>8}  {'files/s':>9}  {'lines/s':>10}")
        for name, secs in rows:
            print(f"{name:<{width}}  {secs:8.3f}  {info['files'] / secs:9.0f}  {info['lines'] / secs:10.0f}")
        if not args.skip_fixit:
            ours_api, ours_cli = rows[0][1], rows[1][1]
            fixit_best = min(s for name, s in rows if name.startswith("fixit"))
            fixit_cli = rows[-1][1]
            print(f"ratio ours/fixit (throughput), API vs fastest fixit: {fixit_best / ours_api:.1f}x")
            print(f"ratio ours/fixit (throughput), CLI vs fixit CLI:     {fixit_cli / ours_cli:.1f}x")
            print(f"ratio ours/fixit (throughput), CLI vs fastest fixit: {fixit_best / ours_cli:.1f}x")
        return 0
    finally:
        if args.keep is None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
