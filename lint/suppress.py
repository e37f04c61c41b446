"""Method-level suppression comments.

    # hicache-lint: ignore[HC101] reason: <why>
    def can_terminate_prefetch(self, op):  # or here, on the def line

The comment goes on the def line or in the comment/decorator lines directly
above it. A reason is required; a suppression that silences nothing is
reported (HC105); a malformed one is reported (HC106) and silences nothing.

`# noqa: HC101 reason: <why>` (ruff's and flake8's spelling, codes required)
silences those codes on its own line, the line a finding is reported at; as
above, a reason is required: without one it is reported (HC106) and silences
nothing. Other tools' codes beside ours are left alone, and a bare `# noqa`
silences none of ours.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable, Optional

from lint.findings import Finding
from lint.locate import MethodSite
from lint.rules import SUPPRESSIBLE_CODES

MARKER = re.compile(r"#\s*hicache-lint\s*:\s*(?P<body>.*)$")
IGNORE = re.compile(r"^ignore\s*(?:\[(?P<codes>[^\]]*)\])?\s*(?P<rest>.*)$")
REASON = re.compile(r"^reason\s*:\s*(?P<reason>.*)$")
NOQA = re.compile(r"#\s*noqa\s*:\s*(?P<codes>[A-Za-z]+[0-9]+(?:\s*,\s*[A-Za-z]+[0-9]+)*)", re.IGNORECASE)
OURS = re.compile(r"^HC[0-9]+$")
Enabled = Callable[[str, str], bool]  # (code, path) -> whether it is reported there


@dataclass(frozen=True)
class Suppression:
    line: int
    col: int
    codes: tuple[str, ...]
    problem: Optional[str]  # why it is not valid; None when it is


def _parse(body: str) -> tuple[tuple[str, ...], Optional[str]]:
    """(codes, why the comment is not valid) of an `ignore[...]` comment's text."""
    match = IGNORE.match(body)
    if match is None:
        return (), f"unknown directive {body!r}; expected 'ignore[CODE,...] reason: <text>'"
    if match["codes"] is None:
        return (), "a suppression must name the codes it silences, e.g. 'ignore[HC101] reason: <text>'"
    codes = tuple(c.strip() for c in match["codes"].split(",") if c.strip())
    if not codes:
        return (), "empty code list in 'ignore[]'"
    for code in codes:
        if code not in SUPPRESSIBLE_CODES:
            return codes, f"cannot suppress {code!r}; suppressible codes: {', '.join(SUPPRESSIBLE_CODES)}"
    reason = REASON.match(match["rest"].strip())
    if not (reason and reason["reason"].strip()):
        return codes, f"suppression of {', '.join(codes)} gives no reason; add 'reason: <why>'"
    return codes, None


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
            found.append(Suppression(number, match.start() + 1, *_parse(match["body"].strip())))
    return found


def _finding(path: str, site: MethodSite, line: int, col: int, code: str, message: str) -> Finding:
    """An HC105 / HC106 finding about a comment of `site`'s method."""
    return Finding(path, line, col, code, message, site.qualname, site.def_line)


def apply(findings: list[Finding], methods: Iterable[tuple[str, MethodSite, list[str]]],
          enabled: Enabled) -> list[Finding]:
    """Drop suppressed findings; add HC105 (unused) and HC106 (invalid) findings."""
    methods = list(methods)
    kept = list(findings)
    for path, site, lines in methods:
        for sup in method_suppressions(lines, site):
            if sup.problem is not None:
                kept.append(_finding(path, site, sup.line, sup.col, "HC106", sup.problem))
                continue
            for code in sup.codes:
                hits = [f for f in kept if f.code == code and f.path == path
                        and f.method_line == site.def_line]
                if hits:
                    kept = [f for f in kept if f not in hits]
                elif enabled(code, path):
                    kept.append(_finding(path, site, sup.line, sup.col, "HC105",
                                         f"unused suppression: {site.qualname} has no {code} finding to silence"))
    kept = _apply_noqa(kept, methods, enabled)
    return [f for f in kept if enabled(f.code, f.path)]


@dataclass(frozen=True)
class Noqa:
    col: int
    codes: tuple[str, ...]  # ours only
    reason: str  # "" when none is given


def noqa_codes(line: str) -> Optional[Noqa]:
    """The `# noqa: CODES [reason: <why>]` comment on the line, if any."""
    hash_at = line.find("#")
    match = NOQA.search(line, hash_at) if hash_at >= 0 else None
    if match is None:
        return None
    codes = [c.strip().upper() for c in match["codes"].split(",")]
    reason = REASON.match(line[match.end():].strip())
    return Noqa(match.start() + 1, tuple(c for c in codes if OURS.match(c)),
                reason["reason"].strip() if reason else "")


def _no_reason(codes: list[str]) -> str:
    """HC106 for a reasonless noqa: ours demand a reason, as `ignore[...]` does."""
    listed = ", ".join(codes)
    return (f"noqa for {listed} gives no reason, so it silences nothing; add 'reason: <why>' after "
            f"its codes: '# noqa: {listed} reason: <why>'")


def _apply_noqa(findings: list[Finding], methods: list[tuple[str, MethodSite, list[str]]],
                enabled: Enabled) -> list[Finding]:
    lines_of = {path: lines for path, _, lines in methods}
    used: set[tuple[str, int, str]] = set()
    kept = []
    for finding in findings:
        lines = lines_of.get(finding.path, [])
        found = noqa_codes(lines[finding.line - 1]) if 0 < finding.line <= len(lines) else None
        if (found is not None and found.reason and finding.code in found.codes
                and finding.code in SUPPRESSIBLE_CODES):
            used.add((finding.path, finding.line, finding.code))
        else:
            kept.append(finding)
    seen: set[tuple[str, int]] = set()
    for path, site, lines in methods:
        for number in range(site.first_line, min(site.end_line, len(lines)) + 1):
            found = noqa_codes(lines[number - 1])
            if found is None or (path, number) in seen:
                continue
            seen.add((path, number))
            col, codes = found.col, found.codes
            suppressible = [c for c in codes if c in SUPPRESSIBLE_CODES]
            if suppressible and not found.reason:
                kept.append(_finding(path, site, number, col, "HC106", _no_reason(suppressible)))
            for code in codes:
                if code not in SUPPRESSIBLE_CODES:
                    kept.append(_finding(path, site, number, col, "HC106", f"cannot suppress {code!r} with noqa; "
                                         f"suppressible codes: {', '.join(SUPPRESSIBLE_CODES)}"))
                elif found.reason and (path, number, code) not in used and enabled(code, path):
                    kept.append(_finding(path, site, number, col, "HC105",
                                         f"unused noqa: no {code} finding on this line to silence"))
    return kept
