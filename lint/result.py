"""What a run found, and the exit status it gives."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from lint.findings import FileError, Finding
from lint.rules import ERROR, INFO, WARNING, level_of


@dataclass
class Result:
    findings: list[Finding] = field(default_factory=list)
    errors: list[FileError] = field(default_factory=list)
    fixed: list[str] = field(default_factory=list)  # "path: what was changed"
    declined: list[str] = field(default_factory=list)  # "path: why a finding was not fixed"
    diff: str = ""  # unified diff of the fixes (--diff)
    files_seen: int = 0
    files_parsed: int = 0
    methods: int = 0
    baselined: int = 0  # findings left out because the baseline lists them
    fail_on_warnings: bool = False
    exit_zero: bool = False  # findings never fail the run (--exit-zero); errors still do

    @property
    def exit_code(self) -> int:
        if self.errors:
            return 2
        if self.exit_zero:
            return 0
        return 1 if any(self.fails(f) for f in self.findings) else 0

    def fails(self, finding: Finding) -> bool:
        """Whether the finding fails the run: an error, or a warning with fail-on-warnings."""
        level = level_of(finding.code)
        return level == ERROR or (self.fail_on_warnings and level == WARNING)

    def summary(self) -> str:
        """One line: what was checked and what was found, by level."""
        levels = Counter(level_of(f.code) for f in self.findings)
        counts = [plural(levels.get(level, 0), name) for level, name in
                  ((ERROR, "error"), (WARNING, "warning"), (INFO, "note"))]
        checked = f"{plural(self.methods, 'method')} checked in {self.files_parsed} of {plural(self.files_seen, 'file')}"
        extra = f"; {self.baselined} more in the baseline" if self.baselined else ""
        problems = f"; {plural(len(self.errors), 'input error')}" if self.errors else ""
        return f"hicache-lint: {checked}: {', '.join(counts)}{extra}{problems}"


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"
