"""Rule base classes. A rule owns its code, name, summary, level, fixability,
suppressibility, help text (its docstring) and its VALID / INVALID examples,
which the test suite lints (tests/lint/test_rule_examples.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Iterable, Optional

from lint.findings import Finding

if TYPE_CHECKING:
    from lint.analysis import MethodAnalysis

ERROR = "error"  # fails the run (exit 1)
WARNING = "warning"  # reported; exit 0 unless the configuration fails on warnings


@dataclass(frozen=True)
class Invalid:
    """An example that must produce this rule's code.

    line: expected line of the finding; fixed: expected source after `--fix`;
    message: a fragment the message must contain.
    """

    code: str
    line: Optional[int] = None
    fixed: Optional[str] = None
    message: Optional[str] = None


class Rule:
    code: ClassVar[str]
    name: ClassVar[str]
    summary: ClassVar[str]
    level: ClassVar[str] = ERROR
    fixable: ClassVar[bool] = False
    suppressible: ClassVar[bool] = True
    VALID: ClassVar[tuple[str, ...]] = ()
    INVALID: ClassVar[tuple[Invalid, ...]] = ()

    @classmethod
    def help(cls) -> str:
        return " ".join((cls.__doc__ or cls.summary).split())

    @classmethod
    def finding(cls, method: "MethodAnalysis", line: int, col: int, message: str,
                fixable: bool = False) -> Finding:
        return Finding(method.path, line, col, cls.code, message, method.qualname,
                       method.def_line, fixable)


class MethodRule(Rule):
    """Checks one termination method on its own."""

    def check(self, method: "MethodAnalysis") -> Iterable[Finding]:
        raise NotImplementedError


class GroupRule(Rule):
    """Checks the termination methods linted together."""

    def check_group(self, methods: list["MethodAnalysis"]) -> Iterable[Finding]:
        raise NotImplementedError


class SuppressionRule(Rule):
    """Reported by lint.suppress while applying suppression comments."""

    suppressible = False
