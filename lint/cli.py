"""Command line: `hicache-lint [PATHS...]` / `python -m lint`.

Exit status: 0 clean (warnings alone included, unless --fail-on-warnings),
1 error-level findings, 2 usage, configuration or input errors.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Optional, Sequence

from lint import __version__
from lint import config as config_mod
from lint.api import Result, lint_paths, lint_repo
from lint.config import ConfigError
from lint.findings import FileError
from lint.report import FORMATS, WRITERS
from lint.rules import ALL_RULES, ERROR, level_of


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="hicache-lint",
        description="Check can_terminate_prefetch implementations for the pool-transfer guard.",
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
                        help="lint the configured implementations (for pass_filenames: false hooks)")
    parser.add_argument("--skip-empty", action="store_true",
                        help="skip empty files named on the command line instead of reporting them "
                             "(for hooks that pass every staged file, empty __init__.py included)")
    parser.add_argument("--exit-zero", action="store_true",
                        help="exit 0 even with findings (input and configuration errors still exit 2)")
    parser.add_argument("--fail-on-warnings", action="store_true",
                        help="warnings (HC107) fail the run too (config: fail-on-warnings = true)")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="text and github formats: error-level findings only, no fix notes")
    parser.add_argument("--list-rules", action="store_true", help="print the rules and exit")
    return parser


def _run(args: argparse.Namespace) -> Result:
    if args.config is not None:
        config = config_mod.load_file(args.config)
    else:
        config = config_mod.discover()
    if args.fail_on_warnings:
        config = dataclasses.replace(config, fail_on_warnings=True)
    fixability = args.format in ("json", "sarif")  # only the machine formats carry it
    if args.repo:
        return lint_repo(config, fix=args.fix, diff=args.diff, fixability=fixability)
    return lint_paths(args.paths, config, fix=args.fix, diff=args.diff, skip_empty=args.skip_empty,
                      fixability=fixability)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.list_rules:
        for rule in ALL_RULES:
            print(f"{rule.code} {rule.name} [{rule.level}{', fixable' if rule.fixable else ''}]: {rule.summary}")
        return 0
    if args.repo and args.paths:
        parser.error("--repo lints the configured implementations; do not also pass paths")
    if not args.repo and not args.paths:
        parser.error("no paths given; pass files or directories, or --repo")
    try:
        result = _run(args)
    except ConfigError as exc:
        # machine formats still get a document that carries the error
        result = Result(errors=[FileError(exc.source, exc.message)])
    result.exit_zero = args.exit_zero
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
    sys.stdout.flush()
    return result.exit_code


__all__ = ["main", "build_parser"]
