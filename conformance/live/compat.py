"""`python -m conformance.live.compat TREE@LABEL ...`: which upstream classes the live harness runs on each target, and why not.

    python -m conformance.live.compat --python VENV/bin/python --output docs/results/compatibility.md TREE@LABEL [...]

For each target (an unpacked release wheel, a `git archive` tree), in the
order given, one probe process (the interpreter of SGLang's environment)
imports the tree as --sglang-live does and builds and closes one cache of
every layout the tree runs; the page then says, per class, which rows run
there, or the one line that refused it: the class is not in the target, no
layout the harness is wired to matches it (with the first mark missing), the
tree does not import, or building its cache failed (upstream's exception and
the line it was raised at). Nothing is assumed from a version number.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any, Sequence

from conformance.live.layouts import BY_KEY, CLASS_FILES
from conformance.live.tree import locate, parse_option
from spec.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
PROBE_TIMEOUT_S = 300


def _upstream_frame(exc: BaseException, package: Path) -> str:
    """The innermost frame of the exception inside the SGLang tree, as sglang/<path>:<line>."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if str(package) in f.filename]
    if not frames:
        return ""
    frame = frames[-1]
    return f" (sglang/{Path(frame.filename).relative_to(package)}:{frame.lineno})"


def probe(target: str) -> list[dict[str, Any]]:
    """In this process: import the tree and build one cache of each layout it runs; one record per layout."""
    from conformance.adapter import CacheEnv
    from conformance.live import runtime
    from conformance.live.adapter import adapters_for
    from spec.clock import ManualClock
    from spec.config import TerminationConfig
    from spec.trace import TraceRecorder

    tree = locate(target)
    try:
        runtime.load(tree)
    except ConfigError as exc:
        return [{"layout": key, "status": "error", "why": str(exc)} for key in tree.layouts]
    out = [{"layout": key, "status": "error", "why": why} for key, why in runtime.refused(tree).items()]
    for adapter in adapters_for(tree):
        clock = ManualClock(1000.0)
        termination = TerminationConfig(policy="wait_complete", page_size=adapter.page_size or 4)
        with tempfile.TemporaryDirectory() as storage:
            env = CacheEnv(device="cpu", termination=termination, storage_dir=Path(storage), clock=clock, trace=TraceRecorder(clock),
                           extra_pools=tuple(adapter.default_extra_pools))
            try:
                session = adapter.create(env)
                session.close()
                out.append({"layout": adapter.layout_key, "status": "runs", "row": adapter.name})
            except Exception as exc:
                why = " ".join(f"{type(exc).__name__}: {exc}".split())[:240]
                out.append({"layout": adapter.layout_key, "status": "error", "why": f"building its cache failed: {why}{_upstream_frame(exc, tree.package)}"})
    return out


def survey(target: str, python: str) -> dict[str, Any]:
    """Every class of one target: the rows that run, or the lines that refused each row."""
    from conformance.live.layouts import LAYOUTS

    tree = locate(target)
    runs: dict[str, list[str]] = {name: [] for name in CLASS_FILES}
    refused: dict[str, dict[str, str]] = {name: {} for name in CLASS_FILES}  # class -> layout key -> why
    absent = {line.partition(":")[0] for line in tree.missing}
    for name in absent:
        refused[name][""] = "not in this target"
    for layout in LAYOUTS:
        if layout.key in tree.layouts or layout.class_name in absent:
            continue
        why = layout.missing_in(tree.package)
        if why is not None:
            refused[layout.class_name][layout.key] = f"not run: `{layout.row}`: not {layout.layout_name} ({why})"
    if tree.layouts:
        done = subprocess.run([python, "-m", "conformance.live.compat", "--probe", target], cwd=REPO, capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT_S)
        records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        if not records:
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            records = [{"layout": key, "status": "error", "why": f"the probe process failed: {tail}"} for key in tree.layouts]
        for record in records:
            layout = BY_KEY[record["layout"]]
            if record["status"] == "runs":
                runs[layout.class_name].append(f"runs: `{record['row']}`")
            else:  # the tree's path on this machine, as the page's command names it: TREE
                why = record["why"].replace(str(parse_option(target)[0].resolve()), "TREE")
                refused[layout.class_name][layout.key] = f"not run: `{layout.row}` ({layout.layout_name}): {why}"
    running = {line.partition("sglang-live:")[2].rpartition("@")[0] for lines in runs.values() for line in lines}
    return {"target": tree.label, "classes": {name: runs[name] + [why for key, why in refused[name].items() if BY_KEY.get(key) is None
                                                                  or BY_KEY[key].row not in running] for name in CLASS_FILES}}


def render(surveys: Sequence[dict[str, Any]], command: str) -> str:
    names = list(CLASS_FILES)
    out = ["# Compatibility: which upstream classes the live harness runs, target by target", "",
           "<!-- Generated by `python -m conformance.live.compat` (one probe per target). Do not edit by hand. -->", "",
           f"- command: `{command}`",
           "- a class *runs* where the probe imported the tree and built and closed one cache of that row; every other cell is the "
           "one line that refused it", "",
           "| target | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for s in surveys:
        out.append(f"| {s['target']} | " + " | ".join("<br>".join(_cell(line) for line in s["classes"][n]) or "-" for n in names) + " |")
    return "\n".join(out) + "\n"


def _cell(line: str) -> str:
    return line.replace("|", "\\|")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.live.compat", description=__doc__.split("\n\n")[0])
    parser.add_argument("targets", nargs="+", metavar="TREE[@LABEL]")
    parser.add_argument("--python", default=sys.executable, help="the interpreter of SGLang's environment (.ci/sglang-live-env)")
    parser.add_argument("--output", type=Path)
    parser.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)  # the per-target child process
    args = parser.parse_args(argv)
    try:
        if args.probe:
            for record in probe(args.targets[0]):
                print(json.dumps(record))
            return 0
        surveys = []
        for target in args.targets:
            surveys.append(survey(target, args.python))
            print(f"compat: {target}: " + "; ".join(f"{name}: {lines[0]}" for name, lines in surveys[-1]["classes"].items()), flush=True)
    except ConfigError as exc:
        print(f"python -m conformance.live.compat: {exc}", file=sys.stderr)
        return 2
    if args.output is not None:
        command = "python -m conformance.live.compat --python VENV/bin/python --output " + str(args.output) + " " + " ".join(
            "TREE@" + s["target"] for s in surveys)
        args.output.write_text(render(surveys, command))
        print(f"compat: wrote {args.output} ({len(surveys)} target(s))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
