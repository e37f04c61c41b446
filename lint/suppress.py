"""Method-level suppression comments.

    # hicache-lint: ignore[HC101] reason: <why>
    def can_terminate_prefetch(self, op):  # or here, on the def line

The comment goes on the def line or in the comment/decorator lines directly
above it. A reason is required; a suppression that silences nothing is
reported (HC105); a malformed one is reported (HC106) and silences nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Optional

from lint.config import Config
from lint.findings import Finding
from lint.locate import MethodSite
from lint.rules import SUPPRESSIBLE_CODES

MARKER = re.compile(r"#\s*hicache-lint\s*:\s*(?P<body>.*)$")
IGNORE = re.compile(r"^ignore\s*(?:\[(?P<codes>[^\]]*)\])?\s*(?P<rest>.*)$")
REASON = re.compile(r"^reason\s*:\s*(?P<reason>.*)$")



@dataclass(frozen=True)
class Suppression:
    line: int
    col: int
    codes: tuple[str, ...]
    reason: Optional[str]
    problem: Optional[str]  # why it is not valid; None when it is


def _parse(body: str, line: int, col: int) -> Suppression:
    match = IGNORE.match(body.strip())
    if match is None:
        return Suppression(line, col, (), None,
                           f"unknown directive {body.strip()!r}; expected 'ignore[CODE,...] reason: <text>'")
    if match["codes"] is None:
        return Suppression(line, col, (), None,
                           "a suppression must name the codes it silences, e.g. 'ignore[HC101] reason: <text>'")
    codes = tuple(c.strip() for c in match["codes"].split(",") if c.strip())
    if not codes:
        return Suppression(line, col, (), None, "empty code list in 'ignore[]'")
    for code in codes:
        if code not in SUPPRESSIBLE_CODES:
            return Suppression(line, col, codes, None,
                               f"cannot suppress {code!r}; suppressible codes: {', '.join(SUPPRESSIBLE_CODES)}")
    rest = match["rest"].strip()
    reason_match = REASON.match(rest)
    reason = reason_match["reason"].strip() if reason_match else ""
    if not reason:
        return Suppression(line, col, codes, None,
                           f"suppression of {', '.join(codes)} gives no reason; add 'reason: <why>'")
    return Suppression(line, col, codes, reason, None)


def method_suppressions(lines: list[str], site: MethodSite) -> list[Suppression]:
    """Suppressions on the def line, between decorators, or in the comment block above."""
    numbers = list(range(site.first_line, site.def_line + 1))
    above = site.first_line - 1
    while above >= 1 and lines[above - 1].lstrip().startswith("#"):
        numbers.append(above)
        above -= 1
    found: list[Suppression] = []
    for number in sorted(numbers):
        text = lines[number - 1]
        hash_at = text.find("#")
        if hash_at < 0:
            continue
        match = MARKER.search(text, hash_at)
        if match:
            found.append(_parse(match["body"], number, match.start() + 1))
    return found


def apply(findings: list[Finding], methods: Iterable[tuple[str, MethodSite, list[str]]],
          config: Config) -> list[Finding]:
    """Drop suppressed findings; add HC105 (unused) and HC106 (invalid) findings."""
    kept = list(findings)
    for path, site, lines in methods:
        for sup in method_suppressions(lines, site):
            if sup.problem is not None:
                kept.append(Finding(path, sup.line, sup.col, "HC106", sup.problem,
                                    site.qualname, site.def_line))
                continue
            for code in sup.codes:
                hits = [f for f in kept if f.code == code and f.path == path
                        and f.method_line == site.def_line]
                if hits:
                    kept = [f for f in kept if f not in hits]
                elif config.enabled(code):
                    kept.append(Finding(
                        path, sup.line, sup.col, "HC105",
                        f"unused suppression: {site.qualname} has no {code} finding to silence",
                        site.qualname, site.def_line,
                    ))
    return [f for f in kept if config.enabled(f.code)]
