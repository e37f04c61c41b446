"""Fixit 2 rule with HC101's per-method meaning, for benchmarks/bench_lint.py.

A method named `can_terminate_prefetch`, defined directly in a class, is
reported when no statement of it is a guard as HC101 reads one
(lint/analysis/guard.py):

- an `if` whose condition reads "transfers pending": `pool_transfers_done`
  (an attribute, a `getattr(op, "pool_transfers_done", ...)` key, or a local
  bound to either) negated with `not`, or compared `== False` / `!= True`,
  and whose body forces something to no: a `name = False` (or `= 0`), or
  `return False`;
- `x = x and <done>`, `x &= <done>`, or one boolean expression that folds
  "not pending" in (`x = x and not (completed and not <done>)`).

So a check of the wrong polarity (`if completed and op.pool_transfers_done:`)
or one that forces nothing (`if not op.pool_transfers_done: log(...)`) is no
guard, as in HC101. Skipped as HC101 skips them: abstract stubs (a body of a
docstring, `pass`, `...` or a `raise`) and `super()` delegations.

What HC101 adds that this rule does not: whether a guard is owed at all (the
class brings extra-pool transfers in, the code base defines the flag: both
searched across files), which look-alike name a method read instead, the
configured method names and the ACK-drain architecture (HC108's), and the fix.
On the benchmark's files every candidate class owes its guard, so both report
the same methods.
"""

from __future__ import annotations

from typing import Optional

import libcst as cst
import libcst.matchers as m
from fixit import Invalid, LintRule, Valid

METHODS = frozenset({"can_terminate_prefetch"})
DONE = "pool_transfers_done"

_FALSE = m.Name("False") | m.Integer(value="0")


def _is_done(node: cst.BaseExpression, aliases: set[str]) -> bool:
    """The flag itself: `x.pool_transfers_done`, `getattr(x, "pool_transfers_done", ...)`, or a local holding it."""
    if m.matches(node, m.Attribute(attr=m.Name(DONE))):
        return True
    if m.matches(node, m.Call(func=m.Name("getattr"))) and len(node.args) >= 2:
        key = node.args[1].value
        return isinstance(key, cst.SimpleString) and key.evaluated_value == DONE
    return isinstance(node, cst.Name) and node.value in aliases


def _pending(test: cst.BaseExpression, aliases: set[str]) -> bool:
    """The condition reads "transfers pending" (the flag negated), alone or in an `and` chain."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        return _pending(test.left, aliases) or _pending(test.right, aliases)
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return _is_done(test.expression, aliases)
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        target = test.comparisons[0]
        negated = (isinstance(target.operator, (cst.Equal, cst.Is)) and m.matches(target.comparator, m.Name("False"))
                   or isinstance(target.operator, (cst.NotEqual, cst.IsNot))
                   and m.matches(target.comparator, m.Name("True")))
        return negated and _is_done(test.left, aliases)
    return False


def _forces_no(body: cst.BaseSuite) -> bool:
    for stmt in m.findall(body, m.Assign() | m.Return()):
        if isinstance(stmt, cst.Assign) and m.matches(stmt.value, _FALSE):
            return True
        if isinstance(stmt, cst.Return) and stmt.value is not None and m.matches(stmt.value, _FALSE):
            return True
    return False


def _operands(node: cst.BaseExpression) -> list[cst.BaseExpression]:
    if isinstance(node, cst.BooleanOperation) and isinstance(node.operator, cst.And):
        return _operands(node.left) + _operands(node.right)
    return [node]


def _folds_done(stmt: cst.CSTNode, aliases: set[str]) -> bool:
    """`x = x and <done>`, `x = ... and not (<pending>)` (one boolean expression), or `x &= <done>`."""
    if isinstance(stmt, cst.AugAssign) and isinstance(stmt.operator, cst.BitAndAssign):
        return _is_done(stmt.value, aliases)
    if not (isinstance(stmt, cst.Assign) and isinstance(stmt.value, cst.BooleanOperation)):
        return False
    return any(_is_done(part, aliases) or isinstance(part, cst.UnaryOperation) and isinstance(
        part.operator, cst.Not) and _pending(part.expression, aliases) for part in _operands(stmt.value))


def _skipped(func: cst.FunctionDef) -> bool:
    """An abstract stub or a `super()` delegation: no logic to guard."""
    body = func.body.body if isinstance(func.body, cst.IndentedBlock) else ()
    statements = [s for s in body if not m.matches(
        s, m.SimpleStatementLine(body=[m.Expr(value=m.SimpleString() | m.ConcatenatedString())]))]
    if all(m.matches(s, m.SimpleStatementLine(body=[m.Pass() | m.Expr(value=m.Ellipsis()) | m.Raise()]))
           for s in statements):
        return True
    return len(statements) == 1 and bool(m.findall(statements[0], m.Call(func=m.Attribute(
        value=m.Call(func=m.Name("super")), attr=m.Name(func.name.value)))))


def has_guard(func: cst.FunctionDef) -> bool:
    aliases: set[str] = set()
    for node in m.findall(func.body, m.Assign() | m.AugAssign() | m.If()):
        if isinstance(node, cst.If):
            if _pending(node.test, aliases) and _forces_no(node.body):
                return True
            continue
        if _folds_done(node, aliases):
            return True
        if isinstance(node, cst.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0].target, cst.Name) and _is_done(node.value, aliases):
            aliases.add(node.targets[0].target.value)  # `extras_done = op.pool_transfers_done`
    return False


class GuardMissing(LintRule):
    MESSAGE = "can_terminate_prefetch has no pool_transfers_done guard forcing the vote to no"

    VALID = [
        Valid(
            """
            class Cache:
                def can_terminate_prefetch(self, op):
                    completed = op.completed_tokens == len(op.hash_value)
                    if completed and not getattr(op, "pool_transfers_done", True):
                        completed = False
                    return completed
            """
        ),
        Valid(
            """
            class Cache:
                def can_terminate_prefetch(self, op):
                    completed = op.completed_tokens == len(op.hash_value)
                    extras_done = op.pool_transfers_done
                    completed &= extras_done
                    return completed
            """
        ),
        Valid(
            """
            class Wrapper(Base):
                def can_terminate_prefetch(self, op):
                    return super().can_terminate_prefetch(op)
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            class Cache:
                def can_terminate_prefetch(self, op):
                    return op.completed_tokens == len(op.hash_value)
            """
        ),
        Invalid(  # the wrong polarity: forces no once the transfers are done
            """
            class Cache:
                def can_terminate_prefetch(self, op):
                    completed = op.completed_tokens == len(op.hash_value)
                    if completed and op.pool_transfers_done:
                        completed = False
                    return completed
            """
        ),
        Invalid(  # the check forces nothing
            """
            class Cache:
                def can_terminate_prefetch(self, op):
                    completed = op.completed_tokens == len(op.hash_value)
                    if completed and not op.pool_transfers_done:
                        self.log.warning("pools still loading")
                    return completed
            """
        ),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[Optional[cst.ClassDef]] = []

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.stack.append(node)

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self.stack.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        in_class = bool(self.stack) and self.stack[-1] is not None
        self.stack.append(None)  # a function's own scope: a nested def is no method
        if not in_class or node.name.value not in METHODS or _skipped(node) or has_guard(node):
            return
        self.report(node.name, self.MESSAGE)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.stack.pop()
