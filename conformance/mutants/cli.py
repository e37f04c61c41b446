"""`python -m conformance.mutants --cache-impl module:factory`: a mutation campaign against an implementation.

Exit status: 0 when every mutant not argued equivalent was killed, 1 when
some survived, 2 for bad input or a suite that fails unmutated (one line).
Arguments may come from a file, one per line: `@FILE`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence, TextIO

from spec.errors import ConfigError

PROG = "python -m conformance.mutants"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        self.exit(2, f"{self.prog}: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, fromfile_prefix_chars="@", description=__doc__.splitlines()[0])
    parser.add_argument("--cache-impl", action="append", required=True, metavar="MODULE:FACTORY",
                        help="an adapter factory, as for pytest --cache-impl (repeatable: one campaign each)")
    parser.add_argument("--select", action="append", default=[], metavar="PATTERN",
                        help="run only mutants whose id matches (an id, or a glob over ids; repeatable)")
    parser.add_argument("--limit", type=int, metavar="N", help="at most N mutants per implementation (after --select)")
    parser.add_argument("--list", action="store_true", help="list the mutants (id, expected clause, change) and run nothing")
    parser.add_argument("--jobs", default="auto", metavar="N", help="xdist workers per suite run: a number or 'auto' (default); 0: no xdist")
    parser.add_argument("--timeout", type=float, metavar="SECONDS",
                        help="limit per mutant (default: 3 times the unmutated run plus 30 s, at least 60 s)")
    parser.add_argument("--report", metavar="PATH", help="write the results as JSON to PATH")
    parser.add_argument("--equivalent", action="append", default=[], metavar="ID=REASON",
                        help="argue a mutant equivalent: why no test can tell it from the original (repeatable)")
    parser.add_argument("--breaks-no-clause", action="append", default=[], metavar="ID=REASON",
                        help="argue that a mutant breaks no clause (the cache stays safe and live, only worse at caching): "
                             "its kill is right to name none (repeatable)")
    parser.add_argument("-k", dest="keyword", metavar="EXPR", help="run only these conformance tests (pytest -k)")
    return parser


def _checked(args: argparse.Namespace) -> tuple[dict[str, str], dict[str, str]]:
    if args.limit is not None and args.limit < 1:
        raise ConfigError("--limit", args.limit, "a whole number of mutants >= 1")
    if args.timeout is not None and not args.timeout > 0:
        raise ConfigError("--timeout", args.timeout, "seconds > 0")
    if args.jobs != "auto" and not (args.jobs.isdigit()):
        raise ConfigError("--jobs", args.jobs, "a whole number >= 0 or 'auto'")
    if args.report is not None:
        _writable(Path(args.report))
    claimed = _arguments("--equivalent", args.equivalent, "why no test can tell it from the original")
    no_clause = _arguments("--breaks-no-clause", args.breaks_no_clause, "why the cache stays safe and live under it")
    both = sorted(claimed.keys() & no_clause.keys())
    if both:
        raise ConfigError("--breaks-no-clause", both[0], "a mutant not also argued equivalent (an equivalent mutant is never killed)")
    return claimed, no_clause


def _arguments(option: str, entries: Sequence[str], why: str) -> dict[str, str]:
    argued: dict[str, str] = {}
    for entry in entries:
        mutant_id, sep, reason = entry.partition("=")
        if not sep or not mutant_id.strip() or not reason.strip():
            raise ConfigError(option, entry, f"ID=REASON: a mutant id, '=', and {why}")
        argued[mutant_id.strip()] = reason.strip()
    return argued


def _writable(path: Path) -> None:
    """Fail before the campaign, not after hours of it, when the report cannot be written."""
    if path.is_dir():
        raise ConfigError("--report", str(path), "a file path to write JSON to (this is a folder)")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise ConfigError("--report", str(path), f"a file path that can be written ({exc.strerror})") from None


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    args = _parser().parse_args(argv)
    try:
        claimed, no_clause = _checked(args)
        from conformance.mutants.campaign import plan_campaign  # libcst and the adapters load only past the usage checks

        plans = plan_campaign(args.cache_impl, select=args.select, limit=args.limit, equivalent=claimed, no_clause=no_clause)
    except ConfigError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    if args.list:
        _print_list(plans, claimed, no_clause, out)
        return 0
    return _run(plans, args, claimed, no_clause, out, list(argv) if argv is not None else sys.argv[1:])


def _print_list(plans, claimed, no_clause, out: TextIO) -> None:
    from conformance.mutants.campaign import equivalence

    for plan in plans:
        print(f"== {plan.adapter} ({plan.spec}): {len(plan.mutants)} of {plan.generated} mutants, in {plan.functions} protocol functions", file=out)
        for m in plan.mutants:
            why = equivalence(m, claimed)
            print(f"{m.id}  [{m.function}; expects {'/'.join(m.expected) or 'no clause'}] {m.description}"
                  + (f"  (argued equivalent: {why})" if why else "")
                  + (f"  (argued to break no clause: {no_clause[m.id]})" if m.id in no_clause else ""), file=out)


def _run(plans, args: argparse.Namespace, claimed: dict[str, str], no_clause: dict[str, str], out: TextIO, argv: list[str]) -> int:
    from conformance.mutants.campaign import BaselineError, run_campaign
    from conformance.mutants.summary import figures, mutant_line, report_json, summary_lines

    began, clock = datetime.now(timezone.utc).isoformat(timespec="seconds"), time.monotonic()

    def started(plan, baseline_s: float, limit_s: float) -> None:
        print(f"== {plan.adapter} ({plan.spec}): {len(plan.mutants)} mutants; the unmutated suite passed in {baseline_s:.0f} s; "
              f"limit {limit_s:.0f} s per mutant", file=out, flush=True)

    def report(result, index: int, total: int) -> None:
        print(f"[{index + 1}/{total}] {mutant_line(result)}", file=out, flush=True)

    try:
        runs = run_campaign(plans, jobs=args.jobs, keyword=args.keyword, timeout_s=args.timeout, claimed=claimed,
                            no_clause=no_clause, report=report, started=started)
    except (BaselineError, ConfigError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    wall_s = time.monotonic() - clock
    for line in summary_lines(runs):
        print(line, file=out)
    print(f"wall time: {wall_s:.0f} s", file=out)
    if args.report:
        path = Path(args.report)
        path.write_text(json.dumps(report_json(runs, command=[PROG, *argv], started=began, wall_s=wall_s), indent=2) + "\n", encoding="utf-8")
        print(f"report written: {path}", file=out)
    total = figures([r for run in runs for r in run.results])
    return 1 if total["survived"] else 0
