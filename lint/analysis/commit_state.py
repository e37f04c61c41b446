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

from dataclasses import dataclass, replace
from typing import Callable, Mapping, Optional

import libcst as cst

from lint.cstutil import attribute_read, is_name, operands, walk
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


def positional(call: cst.Call) -> list[cst.BaseExpression]:
    """The call's positional arguments (a `*xs` one included), as the stdlib's `Call.args`."""
    return [a.value for a in call.args if a.keyword is None and a.star != "**"]


def reads_done(node: cst.CSTNode, flag: str) -> bool:
    return any(attribute_read(n) == flag for n in walk(node))


def is_constant(node: Optional[cst.CSTNode], value: object) -> bool:
    """`node` is the literal None, True or False."""
    return is_name(node, str(value)) if value in (None, True, False) else False


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

    def facts(self, expr: cst.CSTNode, holds: bool, aliases: Mapping[str, cst.CSTNode],
              is_sidecar: Callable[[cst.CSTNode], bool]) -> dict[str, bool]:
        """What is known when `expr` evaluates to `holds`. `aliases`: locals
        bound to a test; `is_sidecar`: whether an object is a sidecar element
        (whose slots are not the operation's allocation)."""
        def again(node: cst.CSTNode, value: bool) -> dict[str, bool]:
            return self.facts(node, value, aliases, is_sidecar)

        if isinstance(expr, cst.Name) and expr.value in aliases:
            rest = {k: v for k, v in aliases.items() if k != expr.value}
            return self.facts(aliases[expr.value], holds, rest, is_sidecar)
        if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Not):
            return again(expr.expression, not holds)
        if isinstance(expr, cst.BooleanOperation):
            conjunction = isinstance(expr.operator, cst.And)
            # all parts hold for a true `and`, none for a false `or`; otherwise nothing is known
            return _union(again(v, holds) for v in operands(expr) or []) if conjunction == holds else {}
        if attribute_read(expr) == self.flag:
            return {"done": holds}
        if self._io_ended(expr):
            return {"io_ended": True} if holds else {}
        if self._pools_ended(expr):
            return {"pools_ended": True} if holds else {}
        if isinstance(expr, cst.Comparison) and len(expr.comparisons) == 1:
            op, constant = expr.comparisons[0].operator, expr.comparisons[0].comparator
            positive = isinstance(op, (cst.Equal, cst.Is))
            if is_constant(constant, None):
                if positive == isinstance(op, (cst.NotEqual, cst.IsNot)):
                    return {}
                left = expr.left
                if self._pools_ended(left):  # `ack.pool_hits is not None`: the pool get's result arrived
                    return {"pools_ended": True} if holds != positive else {}
                if (isinstance(left, cst.Attribute) and left.attr.value in self.allocation
                        and not is_sidecar(left.value) and positive == holds):
                    return {"unallocated": True}
                return {}
            for value in (True, False):
                if is_constant(constant, value):
                    return again(expr.left, holds if positive == value else not holds)
        return {}

    def _io_ended(self, expr: cst.CSTNode) -> bool:
        if isinstance(expr, cst.Call) and not expr.args:
            expr = expr.func
        return isinstance(expr, cst.Attribute) and expr.attr.value in self.io_ended

    def _pools_ended(self, expr: cst.CSTNode) -> bool:
        """`ack.pool_hits`, or a call of a `pools-ended` method (with any arguments)."""
        if isinstance(expr, cst.Call):
            expr = expr.func
        name = expr.attr.value if isinstance(expr, cst.Attribute) else expr.value if isinstance(expr, cst.Name) else None
        return name in self.pools_ended

    def allocates(self, stmt: cst.CSTNode, is_sidecar: Callable[[cst.CSTNode], bool]) -> bool:
        """`stmt` stores an operation's hit allocation (not a sidecar element's slots)."""
        if isinstance(stmt, cst.Assign):
            targets, value = [t.target for t in stmt.targets], stmt.value
        elif isinstance(stmt, cst.AnnAssign) and stmt.value is not None:
            targets, value = [stmt.target], stmt.value
        else:
            return False
        if is_constant(value, None):
            return False
        return any(isinstance(t, cst.Attribute) and t.attr.value in self.allocation and not is_sidecar(t.value)
                   for t in targets)
