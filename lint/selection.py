"""Which rules run, for the whole run and per file: ruff's select / extend-select / ignore / per-file-ignores.

A selector is a code (HC101), a code prefix (HC1, HC10), ALL, or a rule name
(guard-missing). An ignore wins over a select; `per-file-ignores` maps a glob,
relative to the configuration's directory, to selectors ignored in matching files.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

from lint.config import SECTION, Config
from lint.errors import LintConfigError
from lint.rules import RULES_BY_CODE, RULES_BY_NAME
from lint.source import relative_posix

ACCEPTED = "rule codes " + ", ".join(sorted(RULES_BY_CODE)) + ", their prefixes (HC1), ALL, or their names"


def codes_of(selectors: Iterable[str], where: str, source: str) -> frozenset[str]:
    codes: set[str] = set()
    for selector in selectors:
        if selector in RULES_BY_NAME:
            codes.add(RULES_BY_NAME[selector].code)
            continue
        matched = {c for c in RULES_BY_CODE if selector == "ALL" or c.startswith(selector)}
        if not matched:
            raise LintConfigError(source, f"{where}: unknown rule {selector!r}; accepted: {ACCEPTED}")
        codes |= matched
    return frozenset(codes)


def _matches(relative: str, pattern: str) -> bool:
    name = relative.rsplit("/", 1)[-1]
    if pattern.endswith("/"):
        return relative.startswith(pattern) or fnmatch.fnmatch(relative, pattern + "*")
    return (fnmatch.fnmatch(relative, pattern) or fnmatch.fnmatch(relative, pattern + "/*")
            or ("/" not in pattern and fnmatch.fnmatch(name, pattern)))


@dataclass(frozen=True)
class Selection:
    enabled_codes: frozenset[str]
    per_file: tuple[tuple[str, frozenset[str]], ...]
    root: Path

    def enabled(self, code: str, path: Optional[str] = None) -> bool:
        """Whether the run checks `code`, in the file `path` when given (per-file-ignores)."""
        if code not in self.enabled_codes:
            return False
        if path is None or not self.per_file:
            return True
        relative = relative_posix(path, self.root)
        return not any(code in codes and _matches(relative, pattern) for pattern, codes in self.per_file)


def selection(config: Config, select: Optional[Iterable[str]] = None, extend_select: Iterable[str] = (),
              ignore: Iterable[str] = ()) -> Selection:
    """The rules this run checks: the configuration, then the command line's flags on top (as ruff)."""
    source = str(config.source) if config.source else "pyproject.toml"
    table = f"[tool.{SECTION}]"
    for given, field, origin in ((config.select, f"{table} select = []", source), (select, "--select ''", "hicache-lint")):
        if given is not None and not list(given):  # it would run no rule and still report every file clean
            raise LintConfigError(origin, f"{field} selects no rule; accepted: at least one of {ACCEPTED} "
                                          "(leave it out to check every rule)")
    chosen = codes_of(config.select, f"{table} select", source) if config.select is not None else frozenset(RULES_BY_CODE)
    if select is not None:
        chosen = codes_of(select, "--select", "hicache-lint")
    # the configuration's, then the command line's
    chosen |= codes_of(config.extend_select, f"{table} extend-select", source) | codes_of(
        extend_select, "--extend-select", "hicache-lint")
    chosen -= codes_of(config.ignore, f"{table} ignore", source) | codes_of(ignore, "--ignore", "hicache-lint")
    per_file = tuple((pattern, codes_of(codes, f"{table} per-file-ignores {pattern!r}", source))
                     for pattern, codes in config.per_file_ignores)
    return Selection(chosen, per_file, config.root)
