"""What a path in the commit code knows about an operation's sidecar transfers.

A sidecar result may be committed or released in four states only:
- its transfers are done (`pool_transfers_done` true): the commit owns it;
- every pool transfer has ended (a `pools-ended` signal: the pool get's ACK
  carries its hits): no read is running;
- its operation's IO has ended (the final ACK, an `io-ended` signal) and the
  transfers are *not* done: the drain releases what the commit did not take;
- its operation's hit was never allocated (an `allocation-fields` field
  `is None`, or before the block allocates it): no read ever ran.
Anywhere else a read may still be writing into the slots (sglang PR #31668).
The flag itself may be set only where every pool transfer has ended.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, replace
from typing import Callable, Mapping, Optional

from lint.protocol import DONE


@dataclass(frozen=True)
class State:
    done: Optional[bool] = None  # what the path knows of pool_transfers_done
    io_ended: bool = False  # the operation's IO has ended (the final ACK)
    unallocated: bool = False  # before the operation's hit is allocated: no read ever ran
    pools_ended: bool = False  # every pool transfer has ended (a `pools-ended` signal holds)

    def learn(self, facts: Mapping[str, bool]) -> "State":
        return replace(self, **facts) if facts else self

    def joined(self, bound: "State") -> "State":
        """The state of a value taken under `bound`, used under this one."""
        return State(self.done if self.done is not None else bound.done,
                     self.io_ended or bound.io_ended, self.unallocated or bound.unallocated,
                     self.pools_ended or bound.pools_ended)

    @property
    def safe(self) -> bool:
        return (self.unallocated or self.pools_ended or self.done is True
                or (self.done is False and self.io_ended))

    def why_unsafe(self, flag: str) -> str:
        if self.io_ended:
            return (f"at the final ACK without a {flag} check: when the transfers are done the "
                    "commit owns them (a second release), when not this is their one release")
        if self.done is False:
            return ("while pool transfers are pending and before their IO ended: the read writes into "
                    "slots already released (sglang PR #31668)")
        return (f"outside a {flag} check: a read still in flight is inserted, or writes into "
                "slots already released (sglang PR #31668)")


def getattr_key(node: ast.AST) -> Optional[str]:
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
            and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)):
        return node.args[1].value
    return None


def reads_done(node: ast.AST, flag: str) -> bool:
    return any((isinstance(n, ast.Attribute) and n.attr == flag) or getattr_key(n) == flag
               for n in ast.walk(node))


def _union(parts) -> dict[str, bool]:
    out: dict[str, bool] = {}
    for part in parts:
        out.update(part)
    return out


@dataclass(frozen=True)
class Signals:
    """The configured names through which the code shows those states."""

    io_ended: frozenset[str]  # attributes (or methods) true once the operation's IO ended
    allocation: frozenset[str]  # fields holding an operation's allocated hit (None before)
    pools_ended: frozenset[str] = frozenset()  # attributes (or methods) true once every pool transfer ended
    flag: str = DONE  # the completion flag

    def facts(self, expr: ast.AST, holds: bool, aliases: Mapping[str, ast.expr],
              is_sidecar: Callable[[ast.AST], bool]) -> dict[str, bool]:
        """What is known when `expr` evaluates to `holds`. `aliases`: locals
        bound to a test; `is_sidecar`: whether an object is a sidecar element
        (whose slots are not the operation's allocation)."""
        def again(node: ast.AST, value: bool) -> dict[str, bool]:
            return self.facts(node, value, aliases, is_sidecar)

        if isinstance(expr, ast.Name) and expr.id in aliases:
            rest = {k: v for k, v in aliases.items() if k != expr.id}
            return self.facts(aliases[expr.id], holds, rest, is_sidecar)
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
            return again(expr.operand, not holds)
        if isinstance(expr, ast.BoolOp):
            conjunction = isinstance(expr.op, ast.And)
            # all parts hold for a true `and`, none for a false `or`; otherwise nothing is known
            return _union(again(v, holds) for v in expr.values) if conjunction == holds else {}
        if (isinstance(expr, ast.Attribute) and expr.attr == self.flag) or getattr_key(expr) == self.flag:
            return {"done": holds}
        if self._io_ended(expr):
            return {"io_ended": True} if holds else {}
        if self._pools_ended(expr):
            return {"pools_ended": True} if holds else {}
        if isinstance(expr, ast.Compare) and len(expr.ops) == 1 and isinstance(expr.comparators[0], ast.Constant):
            op, constant = expr.ops[0], expr.comparators[0].value
            positive = isinstance(op, (ast.Eq, ast.Is))
            if constant is None and positive != isinstance(op, (ast.NotEq, ast.IsNot)):
                left = expr.left
                if self._pools_ended(left):  # `ack.pool_hits is not None`: the pool get's result arrived
                    return {"pools_ended": True} if holds != positive else {}
                if (isinstance(left, ast.Attribute) and left.attr in self.allocation
                        and not is_sidecar(left.value) and positive == holds):
                    return {"unallocated": True}
                return {}
            if isinstance(constant, bool):
                return again(expr.left, holds if positive == constant else not holds)
        return {}

    def _io_ended(self, expr: ast.AST) -> bool:
        if isinstance(expr, ast.Call) and not expr.args and not expr.keywords:
            expr = expr.func
        return isinstance(expr, ast.Attribute) and expr.attr in self.io_ended

    def _pools_ended(self, expr: ast.AST) -> bool:
        """`ack.pool_hits`, or a call of a `pools-ended` method (with any arguments)."""
        if isinstance(expr, ast.Call):
            expr = expr.func
        name = expr.attr if isinstance(expr, ast.Attribute) else getattr(expr, "id", None)
        return name in self.pools_ended

    def allocates(self, stmt: ast.stmt, is_sidecar: Callable[[ast.AST], bool]) -> bool:
        """`stmt` stores an operation's hit allocation (not a sidecar element's slots)."""
        targets: list[ast.expr] = []
        if isinstance(stmt, ast.Assign):
            targets, value = stmt.targets, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            targets, value = [stmt.target], stmt.value
        else:
            return False
        if isinstance(value, ast.Constant) and value.value is None:
            return False
        return any(isinstance(t, ast.Attribute) and t.attr in self.allocation and not is_sidecar(t.value)
                   for t in targets)
