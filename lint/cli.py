"""Command line: `hicache-lint [PATHS...]` / `python -m lint`.

Exit status: 0 clean (warnings and notes alone included, unless
--fail-on-warnings), 1 error-level findings, 2 usage, configuration or input
errors (a selection of no rule, a path that is not Python, and a folder or
--repo run that checks no method included, the last unless --allow-empty).

Only argparse loads at import: the linter (and libcst, for a file that holds
a candidate method) loads once the arguments ask for a run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

from lint import __version__

if TYPE_CHECKING:
    from lint.result import Result

FORMATS = ("text", "json", "github", "sarif")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        self.exit(2, f"{self.prog}: error: {message}\n")


def _codes(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="hicache-lint",
        description="Check prefetch-termination implementations for their pool-transfer guard.",
    )
    parser.add_argument("paths", nargs="*", help="files or directories (recursed for *.py)")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--format", choices=FORMATS, default="text", help="output format")
    fixing = parser.add_mutually_exclusive_group()
    fixing.add_argument("--fix", action="store_true", help="apply available fixes in place")
    fixing.add_argument("--diff", action="store_true",
                        help="print what --fix would change as a unified diff; write nothing")
    parser.add_argument("--config", type=Path, help="TOML file with a [tool.hicache-lint] table")
    parser.add_argument("--repo", action="store_true",
                        help="lint the configured implementations, or with none configured every candidate "
                             "method under the configuration's folder (for pass_filenames: false hooks)")
    parser.add_argument("--select", type=_codes, metavar="CODES",
                        help="comma-separated rule codes, prefixes or names to check (replaces the configuration's)")
    parser.add_argument("--extend-select", type=_codes, default=[], metavar="CODES",
                        help="rules to check in addition to the selected ones")
    parser.add_argument("--ignore", type=_codes, default=[], metavar="CODES", help="rules not to check")
    parser.add_argument("--baseline", type=Path, metavar="FILE",
                        help="leave out the findings this baseline holds (config: baseline = 'FILE')")
    parser.add_argument("--write-baseline", type=Path, metavar="FILE",
                        help="record the run's failing findings in FILE and exit 0")
    parser.add_argument("--allow-empty", action="store_true",
                        help="a folder or --repo run that finds no method exits 0 instead of 2")
    parser.add_argument("--skip-empty", action="store_true",
                        help="skip empty files named on the command line instead of reporting them "
                             "(for hooks that pass every staged file, empty __init__.py included)")
    parser.add_argument("--exit-zero", action="store_true",
                        help="exit 0 even with findings (input and configuration errors still exit 2)")
    parser.add_argument("--fail-on-warnings", action="store_true",
                        help="warnings (HC107) fail the run too (config: fail-on-warnings = true)")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="text and github formats: error-level findings only, no fix notes, no summary")
    parser.add_argument("--list-rules", action="store_true",
                        help="print the rules and exit (with --format json: a JSON list)")
    return parser


def _run(args: argparse.Namespace) -> "Result":
    import dataclasses

    from lint import baseline, config as config_mod
    from lint.api import lint_paths, lint_repo
    from lint.selection import selection as select_rules

    if args.config is not None:
        config = config_mod.load_file(args.config)
    else:
        config = config_mod.find([] if args.repo else args.paths)
    if args.fail_on_warnings:
        config = dataclasses.replace(config, fail_on_warnings=True)
    if args.write_baseline is not None or args.baseline is not None:
        config = dataclasses.replace(config, baseline=args.baseline)
    rules = select_rules(config, args.select, args.extend_select, args.ignore)
    fixability = args.format in ("json", "sarif")  # only the machine formats carry it
    options = dict(fix=args.fix, diff=args.diff, fixability=fixability, selection=rules,
                   allow_empty=args.allow_empty)
    if args.repo:
        result = lint_repo(config, **options)
    else:
        result = lint_paths(args.paths, config, skip_empty=args.skip_empty, **options)
    if args.write_baseline is not None and not result.errors:
        failing = [f for f in result.findings if result.fails(f)]
        baseline.write(args.write_baseline, failing)
        result.baselined, result.findings = len(failing), [f for f in result.findings if f not in failing]
    return result


def _list_rules(fmt: str) -> int:
    from lint.rules import ALL_RULES

    if fmt == "json":
        import json

        rules = [{"code": r.code, "name": r.name, "level": r.level, "summary": r.summary, "fixable": r.fixable,
                  "suppressible": r.suppressible, "clauses": list(r.clauses), "help": r.help()}
                 for r in ALL_RULES]
        print(json.dumps(rules, indent=2))
        return 0
    for rule in ALL_RULES:
        print(f"{rule.code} {rule.name} [{rule.level}{', fixable' if rule.fixable else ''}]: {rule.summary}")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.list_rules:
        return _list_rules(args.format)
    if args.repo and args.paths:
        parser.error("--repo lints the configured implementations; do not also pass paths")
    if not args.repo and not args.paths:
        parser.error("no paths given; pass files or directories, or --repo")
    if args.write_baseline is not None and (args.fix or args.diff):
        parser.error("--write-baseline records findings as they are; do not combine it with --fix or --diff")

    import dataclasses

    from lint.errors import LintConfigError
    from lint.findings import FileError
    from lint.report import WRITERS
    from lint.result import Result, plural
    from lint.rules import ERROR, level_of

    try:
        result = _run(args)
    except LintConfigError as exc:
        # machine formats still get a document that carries the error
        result = Result(errors=[FileError(exc.source, exc.message)])
    result.exit_zero = args.exit_zero or args.write_baseline is not None
    shown = result
    if args.quiet and args.format in ("text", "github"):
        shown = dataclasses.replace(result, findings=[f for f in result.findings if level_of(f.code) == ERROR])
    if args.diff:
        sys.stdout.write(result.diff)  # stdout is the patch alone, for `git apply`
    else:
        WRITERS[args.format](shown, sys.stdout)
    if not args.quiet:
        for note in result.fixed:
            print(f"fixed: {note}", file=sys.stderr)
        for note in result.declined:
            print(note, file=sys.stderr)
    for error in result.errors:
        print(str(error), file=sys.stderr)
    if args.write_baseline is not None and not result.errors:
        print(f"hicache-lint: wrote {plural(result.baselined, 'finding')} to the baseline {args.write_baseline}",
              file=sys.stderr)
    elif not args.quiet and args.format == "text" and (result.methods or result.errors or result.findings):
        # stdout holds findings only, one per line; files with no candidate (a hook's staged files) say nothing
        print(result.summary(), file=sys.stderr)
    sys.stdout.flush()
    return result.exit_code


__all__ = ["main", "build_parser"]
