"""Pass 2: what each local means, whatever it is called.

Inputs: the parsed method and its `Body`. Outputs: the operation parameter,
whether the method is only a stub, the "terminated" local, locals that hold the
done flag, the vote and the completion predicate(s). The vote can depend on
the reduce payload (`1 - int(vote)`), so `find_vote` takes the reduce's
payload elements when the return statement does not name it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import libcst as cst

from lint.analysis.body import Body, covered, single_target
from lint.cstutil import (
    VOTING_POLICIES,
    attribute_read,
    attributes_named,
    children,
    dotted_name,
    is_name,
    last_part,
    looks_boolean,
    names_read,
    one_minus,
    operands,
    reads_completion,
)
from lint.protocol import DONE


@dataclass(frozen=True)
class Roles:
    op_param: Optional[str]
    terminated: Optional[str]
    vote: Optional[str]
    predicates: frozenset[str]
    done_aliases: dict[str, bool]
    flag: str = DONE  # the completion flag's configured name


def op_param(func: cst.FunctionDef) -> Optional[str]:
    params = [p.name.value for p in (*func.params.posonly_params, *func.params.params)]
    if params and params[0] in ("self", "cls"):
        params = params[1:]
    return params[0] if params else None


def _stub_line(small: cst.CSTNode) -> bool:
    """`pass`, `raise ...`, `...` or a docstring."""
    return isinstance(small, (cst.Pass, cst.Raise)) or (
        isinstance(small, cst.Expr) and isinstance(small.value, (cst.Ellipsis, cst.SimpleString, cst.ConcatenatedString)))


def skip_reason(func: cst.FunctionDef, method: str) -> Optional[str]:
    """Abstract stubs and pure delegations hold no logic of their own."""
    for dec in func.decorators:
        target = dec.decorator.func if isinstance(dec.decorator, cst.Call) else dec.decorator
        if last_part(dotted_name(target)) == "abstractmethod":
            return "abstract"
    if not isinstance(func.body, cst.IndentedBlock):
        return None
    for stmt in func.body.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            return None
        for small in stmt.body:
            if _stub_line(small):
                continue
            if isinstance(small, cst.Return) and _is_delegation(small.value, method):
                continue
            return None
    return "abstract or delegating"


def _is_delegation(value: Optional[cst.CSTNode], method: str) -> bool:
    """`return super().m(...)` or `return <something>.m(...)` for the same method."""
    if not (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)):
        return False
    is_super = isinstance(value.func.value, cst.Call) and is_name(value.func.value.func, "super")
    return is_super or value.func.attr.value == method


def find_terminated(body: Body) -> Optional[str]:
    firsts: list[tuple[int, str]] = []
    for name, recs in body.bindings.items():
        value = recs[0].value()
        if value is not None and attributes_named(value, "terminated"):
            firsts.append((recs[0].line, name))
    return min(firsts)[1] if firsts else None


def done_polarities(expr: cst.CSTNode, aliases: dict[str, bool], flag: str, negated: bool = False) -> list[bool]:
    """For each read of the done flag (named `flag`) in `expr`: True when it is read negated."""
    key = attribute_read(expr)
    if key is not None and flag in key:
        return [negated]
    if isinstance(expr, cst.Name) and expr.value in aliases:
        return [negated != aliases[expr.value]]
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Not):
        return done_polarities(expr.expression, aliases, flag, not negated)
    if isinstance(expr, cst.Comparison) and len(expr.comparisons) == 1:
        target = expr.comparisons[0]
        constant = target.comparator
        if is_name(constant, "True", "False"):
            assert isinstance(constant, cst.Name)
            flip = (constant.value == "False") != isinstance(target.operator, (cst.NotEqual, cst.IsNot))
            return done_polarities(expr.left, aliases, flag, negated != flip)
    out: list[bool] = []
    for child in children(expr):
        out.extend(done_polarities(child, aliases, flag, negated))
    return out


def find_done_aliases(body: Body, flag: str) -> dict[str, bool]:
    """Locals that only ever hold the done flag (or "transfers pending").

    Value: True when the local holds the flag's negation. A local that is
    also bound to something else (the vote, the predicate) is not an alias.
    """
    aliases: dict[str, bool] = {}
    for name, recs in body.bindings.items():
        polarity: Optional[bool] = None
        for rec in recs:
            value = rec.value()
            if not isinstance(rec.node, (cst.Assign, cst.AnnAssign)) or value is None:
                break
            polarities = done_polarities(value, {}, flag)
            if not polarities or name in names_read(value) or reads_completion(value):
                break
            polarity = polarities[0]
        else:
            if polarity is not None:
                aliases[name] = polarity
    return aliases


def vote_from_return(func: cst.FunctionDef, terminated: Optional[str]) -> Optional[str]:
    body = func.body
    if not isinstance(body, cst.IndentedBlock) or not body.body:
        return None
    last = body.body[-1]
    if not (isinstance(last, cst.SimpleStatementLine) and isinstance(last.body[-1], cst.Return)):
        return None
    value = last.body[-1].value
    if isinstance(value, cst.Name) and value.value not in ("True", "False"):
        return value.value
    parts = operands(value, cst.Or) if value is not None else None
    if parts:
        names = [o.value for o in parts if isinstance(o, cst.Name) and o.value != terminated]
        if names:
            return names[0]
    return None


def binds_completion(body: Body, name: str) -> bool:
    return any(
        reads_completion(rec.value()) and VOTING_POLICIES <= covered(rec.ctx)
        for rec in body.bindings.get(name, [])
    )


def vote_fallback(body: Body, payload: Optional[Sequence[cst.BaseExpression]]) -> Optional[str]:
    """The vote when the return does not name it: the `x` of `1 - int(x)` in
    the reduce payload, else the local set in the wait_complete branch."""
    for element in payload or []:
        inner = one_minus(element)
        if isinstance(inner, cst.Name):
            return inner.value
    for rec in body.recs:
        if covered(rec.ctx) <= {"wait_complete"} and covered(rec.ctx):
            target = single_target(rec.node)
            if target:
                return target
    return None


def find_predicates(body: Body, excluded: set[Optional[str]]) -> frozenset[str]:
    """Boolean locals bound from completion (`completed_tokens`, a `*complet*`
    helper, or another such local) on both voting paths."""
    candidates: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, recs in body.bindings.items():
            if name in candidates or name in excluded:
                continue
            for rec in recs:
                value = rec.value()
                if value is None:
                    continue
                if reads_completion(value) or names_read(value) & candidates:
                    candidates.add(name)
                    changed = True
                    break
    predicates: set[str] = set()
    for name in candidates:
        for rec in body.bindings[name]:
            value = rec.value()
            if (
                value is not None
                and looks_boolean(value)
                and VOTING_POLICIES <= covered(rec.ctx)
                and (reads_completion(value) or names_read(value) & candidates)
            ):
                predicates.add(name)
                break
    return frozenset(predicates)
