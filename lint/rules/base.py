"""Rule base classes. A rule owns its code, name, summary, level, fixability,
suppressibility, help text (its docstring) and its VALID / INVALID examples,
which the test suite lints (tests/lint/test_rule_examples.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Iterable, Optional, Union

from lint.findings import Finding

if TYPE_CHECKING:
    from lint.analysis import MethodAnalysis

ERROR = "error"  # fails the run (exit 1)
WARNING = "warning"  # reported; exit 0 unless the configuration fails on warnings
INFO = "info"  # a note: never fails the run


Table = dict[str, Any]  # a [tool.hicache-lint] table; examples are linted as "example.py"
EXAMPLE_PATH = "example.py"


@dataclass(frozen=True)
class Valid:
    """An example that must not produce this rule's code (under `config`)."""

    code: str
    config: Optional[Table] = None


@dataclass(frozen=True)
class Invalid:
    """An example that must produce this rule's code.

    line: expected line of the finding; fixed: expected source after `--fix`
    (None: not checked; equal to `code`: the fix must change nothing);
    message: a fragment the message must contain; config: the table it is
    linted under.
    """

    code: str
    line: Optional[int] = None
    fixed: Optional[str] = None
    message: Optional[str] = None
    config: Optional[Table] = None


# Appended to an example whose class shows no extra pools of its own: a method
# that brings them in and an operation that defines their completion flag, so
# that a guard is owed there (lint/pools.py). Line numbers above it are kept.
POOLED_TAIL = '''
    def start_prefetch(self, request, pool_transfers):
        return PrefetchOperation(request, pool_transfers)


class PrefetchOperation:
    def __init__(self, request, pool_transfers):
        self.request = request
        self.pool_transfers = pool_transfers
        self.pool_transfers_done = not pool_transfers
'''


def with_pools(example: str) -> str:
    return example + POOLED_TAIL


def fenced(*classes: str, method: str = "can_terminate_prefetch") -> Table:
    """Configuration declaring these example classes fenced (F3 and F5 hold)."""
    return {"implementations": [
        {"method": f"{EXAMPLE_PATH}::{cls}.{method}", "fenced": True} for cls in classes]}


class Rule:
    code: ClassVar[str]
    name: ClassVar[str]
    summary: ClassVar[str]
    level: ClassVar[str] = ERROR
    fixable: ClassVar[bool] = False
    suppressible: ClassVar[bool] = True
    clauses: ClassVar[tuple[str, ...]] = ()  # spec clauses the rule keeps (spec/SPEC.md)
    VALID: ClassVar[tuple[Union[str, Valid], ...]] = ()
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


class NoteRule(Rule):
    """Reported by the linter itself (`Linter.owed` in lint/api.py), never by a check of its own."""

    level = INFO
