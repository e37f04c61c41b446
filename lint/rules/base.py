"""Rule base classes. Every rule carries VALID and INVALID example modules that
the test suite lints (tests/lint/test_rule_examples.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Iterable, Optional

from lint.findings import Finding

if TYPE_CHECKING:
    from lint.model import MethodAnalysis


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
    fixable: ClassVar[bool] = False
    VALID: ClassVar[tuple[str, ...]] = ()
    INVALID: ClassVar[tuple[Invalid, ...]] = ()

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
