"""The commit path of an implementation whose pool-transfer check lives there.

SGLang's 0.5.2x UnifiedRadixCache decides to stop on the timeout alone and
commits through an ACK drain: `pool_transfers_done` then decides which sidecar
hits are inserted into the tree or released to their pools. Inputs: the
class's methods (stdlib ast, from the file's ClassIndex), the configured commit
methods and sidecar field names. Output: every use of a sidecar result that no
`pool_transfers_done` check guards, and whether the commit path checks the flag
at all. Helpers of the same class are followed: a call of one that uses
sidecar results unguarded is such a use where it is called.

A use is guarded when it runs only once the transfers are done: inside
`if <done>:` (or the `else` of `if not <done>:`), after an early exit on
`not <done>` (return, continue, raise) in the same block, on the done side of
`a if <done> else b`, or after `<done> and` in a boolean chain. Reads inside a
condition, and `len()`/`bool()` of a field, only inspect and are not uses.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Iterable, Optional

from lint.locate import ClassIndex, FunctionNode

DONE = "pool_transfers_done"
_INSPECT = frozenset({"len", "bool", "isinstance"})


@dataclass(frozen=True)
class SidecarUse:
    method: str  # the commit method (or helper) it is in
    line: int
    col: int  # 1-based
    what: str  # the field read, or `self.helper(...)`


@dataclass
class CommitPath:
    methods: list[str]  # the configured commit methods found in the class
    missing: list[str]  # configured commit methods the class does not define
    checks_done: bool  # some commit method (or helper it calls) reads pool_transfers_done
    unguarded: list[SidecarUse] = field(default_factory=list)
    def_lines: dict[str, int] = field(default_factory=dict)


def _getattr_key(node: ast.AST) -> Optional[str]:
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
            and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)):
        return node.args[1].value
    return None


def polarity(expr: ast.AST, aliases: dict[str, bool]) -> Optional[bool]:
    """True when `expr` being true means the transfers are done, False when it
    means they are not, None when it says nothing about them."""
    if isinstance(expr, ast.Attribute) and expr.attr == DONE:
        return True
    if _getattr_key(expr) == DONE:
        return True
    if isinstance(expr, ast.Name) and expr.id in aliases:
        return aliases[expr.id]
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
        inner = polarity(expr.operand, aliases)
        return None if inner is None else not inner
    if isinstance(expr, ast.BoolOp):
        found = [polarity(v, aliases) for v in expr.values]
        if isinstance(expr.op, ast.And):
            return next((p for p in found if p is not None), None)
        return found[0] if found and all(p == found[0] for p in found) and found[0] is not None else None
    if isinstance(expr, ast.Compare) and len(expr.ops) == 1 and isinstance(expr.comparators[0], ast.Constant):
        constant = expr.comparators[0].value
        inner = polarity(expr.left, aliases)
        if inner is None or not isinstance(constant, bool):
            return None
        positive = isinstance(expr.ops[0], (ast.Eq, ast.Is)) == constant
        return inner if positive else not inner
    return None


def _reads_done(node: ast.AST) -> bool:
    return any((isinstance(n, ast.Attribute) and n.attr == DONE) or _getattr_key(n) == DONE
               for n in ast.walk(node))


def _exits(body: list[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], (ast.Return, ast.Continue, ast.Raise, ast.Break))


class _Walker:
    """Finds the unguarded sidecar uses of one function."""

    def __init__(self, name: str, fields: frozenset[str], helper_uses) -> None:
        self.name, self.fields, self.helper_uses = name, fields, helper_uses
        self.aliases: dict[str, bool] = {}  # locals holding the done flag (True) or its negation
        self.carriers: set[str] = set()  # locals holding sidecar results
        self.uses: list[SidecarUse] = []

    def _use(self, node: ast.AST, what: str) -> None:
        self.uses.append(SidecarUse(self.name, node.lineno, node.col_offset + 1, what))

    def _is_sidecar(self, node: ast.AST) -> Optional[str]:
        if isinstance(node, ast.Attribute) and node.attr in self.fields:
            return node.attr
        key = _getattr_key(node)
        if key in self.fields:
            return key
        if isinstance(node, ast.Name) and node.id in self.carriers:
            return node.id
        return None

    def expr(self, node: Optional[ast.AST], guarded: bool) -> None:
        if node is None:
            return
        what = self._is_sidecar(node)
        if what is not None:
            if not guarded:
                self._use(node, what)
            return
        if isinstance(node, ast.IfExp):
            side = polarity(node.test, self.aliases)
            self.expr(node.body, guarded or side is True)
            self.expr(node.orelse, guarded or side is False)
            return
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
            for value in node.values:
                self.expr(value, guarded)
                guarded = guarded or polarity(value, self.aliases) is True
            return
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name) and node.func.id in _INSPECT:
                return
            func = node.func
            if (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self"
                    and self.helper_uses(func.attr) and not guarded):
                self._use(node, f"self.{func.attr}(...)")
        for child in ast.iter_child_nodes(node):
            self.expr(child, guarded)

    def block(self, body: Iterable[ast.stmt], guarded: bool) -> None:
        for stmt in body:
            self.stmt(stmt, guarded)
            if isinstance(stmt, ast.If) and not stmt.orelse and _exits(stmt.body):
                # `if not done: return` -- what follows runs only once done
                guarded = guarded or polarity(stmt.test, self.aliases) is False

    def stmt(self, stmt: ast.stmt, guarded: bool) -> None:
        if isinstance(stmt, ast.If):
            side = polarity(stmt.test, self.aliases)
            self.block(stmt.body, guarded or side is True)
            self.block(stmt.orelse, guarded or side is False)
        elif isinstance(stmt, (ast.For, ast.AsyncFor)):
            self.expr(stmt.iter, guarded)
            self.block(stmt.body, guarded)
            self.block(stmt.orelse, guarded)
        elif isinstance(stmt, ast.While):
            self.block(stmt.body, guarded)
            self.block(stmt.orelse, guarded)
        elif isinstance(stmt, (ast.With, ast.AsyncWith)):
            self.block(stmt.body, guarded)
        elif isinstance(stmt, ast.Try):
            for part in (stmt.body, *(h.body for h in stmt.handlers), stmt.orelse, stmt.finalbody):
                self.block(part, guarded)
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return  # a nested scope does not run here
        elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            self._assign(stmt.targets[0].id, stmt.value, guarded)
        else:
            self.expr(stmt, guarded)

    def _assign(self, name: str, value: ast.expr, guarded: bool) -> None:
        side = polarity(value, self.aliases)
        if side is not None and not any(self._is_sidecar(n) for n in ast.walk(value)):
            self.aliases[name] = side
            return
        inner = value.args[0] if (isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
                                  and value.func.id in ("list", "tuple", "dict") and len(value.args) == 1) else value
        if self._is_sidecar(inner) is not None and not guarded:
            self.carriers.add(name)  # only its later uses count
            return
        self.expr(value, guarded)


def analyze_commit(index: ClassIndex, commit: Iterable[str], fields: Iterable[str]) -> CommitPath:
    names = list(commit)
    found = [n for n in names if n in index.methods]
    field_set = frozenset(fields)
    memo: dict[str, Optional[list[SidecarUse]]] = {}

    def uses_of(name: str) -> list[SidecarUse]:
        if name in memo:
            return memo[name] or []  # None: being computed (recursion): nothing new
        memo[name] = None
        func: FunctionNode = index.methods[name]
        walker = _Walker(name, field_set, lambda helper: helper in index.methods and bool(uses_of(helper)))
        walker.block(func.body, False)
        memo[name] = walker.uses
        return walker.uses

    def reaches(name: str, seen: set[str]) -> set[str]:
        """The method and the helpers of the same class it calls, transitively."""
        if name in seen or name not in index.methods:
            return seen
        seen.add(name)
        for node in ast.walk(index.methods[name]):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "self"):
                reaches(node.func.attr, seen)
        return seen

    reached: set[str] = set()
    for name in found:
        reaches(name, reached)
    path = CommitPath(found, [n for n in names if n not in index.methods],
                      any(_reads_done(index.methods[n]) for n in reached))
    for name in found:
        path.unguarded.extend(uses_of(name))
        path.def_lines[name] = index.methods[name].lineno
    return path
