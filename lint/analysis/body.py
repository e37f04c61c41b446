"""Pass 1: the method body as a flat list of statements, each with the branches
(and stop policies) under which it runs.

Input: a parsed method. Output: `Body` (statements in source order, bindings
per local, returns). Every later pass reads this list instead of re-walking
the syntax tree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

import libcst as cst

from lint.cstutil import POLICIES, policy_test
from lint.unit import ParsedMethod

Ctx = tuple[tuple[cst.CSTNode, str], ...]


@dataclass
class StmtRec:
    """One statement of the method body, in source order.

    `node` is a small statement (Assign, Return, ...) or a compound statement
    (If, For, ...) standing for its header; `owner` is the statement as it sits
    in `block` (what a fix removes or inserts next to).
    """

    node: cst.CSTNode
    owner: cst.CSTNode
    block: cst.CSTNode
    ctx: Ctx
    line: int

    def value(self) -> Optional[cst.BaseExpression]:
        node = self.node
        if isinstance(node, (cst.Assign, cst.AnnAssign, cst.AugAssign, cst.Return, cst.Expr)):
            return node.value
        if isinstance(node, (cst.If, cst.While)):
            return node.test
        return None

    def inside(self, other: cst.CSTNode) -> bool:
        return any(anc is other for anc, _ in self.ctx)


@dataclass
class Body:
    recs: list[StmtRec]
    bindings: dict[str, list[StmtRec]] = field(default_factory=dict)
    returns: list[StmtRec] = field(default_factory=list)

    def rec_of(self, node: cst.CSTNode) -> Optional[StmtRec]:
        return next((r for r in self.recs if r.node is node), None)


def covered(ctx: Ctx) -> frozenset[str]:
    """Stop policies under which a statement with this context can run."""
    paths = set(POLICIES)
    for node, branch in ctx:
        if not isinstance(node, cst.If):
            continue
        test = policy_test(node.test)
        if test is None:
            continue
        positive, policies = test
        if branch == "orelse":
            positive = not positive
        if positive:
            paths &= policies
        else:
            paths -= policies
    return frozenset(paths)


def bound_names(node: cst.CSTNode) -> list[str]:
    targets: list[cst.CSTNode] = []
    if isinstance(node, cst.Assign):
        targets = [t.target for t in node.targets]
    elif isinstance(node, (cst.AnnAssign, cst.AugAssign)):
        targets = [node.target]
    names: list[str] = []
    for target in targets:
        if isinstance(target, cst.Name):
            names.append(target.value)
        elif isinstance(target, (cst.Tuple, cst.List)):
            names.extend(e.value.value for e in target.elements if isinstance(e.value, cst.Name))
    return names


def single_target(node: cst.CSTNode) -> Optional[str]:
    if isinstance(node, cst.Assign) and len(node.targets) == 1:
        target = node.targets[0].target
        return target.value if isinstance(target, cst.Name) else None
    if isinstance(node, (cst.AnnAssign, cst.AugAssign)) and isinstance(node.target, cst.Name):
        return node.target.value
    return None


def walk_body(parsed: ParsedMethod) -> Body:
    recs: list[StmtRec] = []
    _walk_block(parsed.func.body, (), recs, parsed.line)
    body = Body(recs)
    for rec in recs:
        for name in bound_names(rec.node):
            body.bindings.setdefault(name, []).append(rec)
    body.returns = [r for r in recs if isinstance(r.node, cst.Return)]
    return body


LineOf = Callable[[cst.CSTNode], int]


def _walk_block(block: cst.CSTNode, ctx: Ctx, out: list[StmtRec], line_of: LineOf) -> None:
    if isinstance(block, cst.SimpleStatementSuite):
        for small in block.body:
            out.append(StmtRec(small, small, block, ctx, line_of(small)))
        return
    assert isinstance(block, cst.IndentedBlock)
    for stmt in block.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                out.append(StmtRec(small, stmt, block, ctx, line_of(small)))
            continue
        out.append(StmtRec(stmt, stmt, block, ctx, line_of(stmt)))
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            continue  # nested scopes do not run as part of this method
        if isinstance(stmt, cst.If):
            _walk_if(stmt, ctx, out, line_of)
            if _is_policy_exit(stmt):
                # `if policy == X: return ...` -- what follows runs only when not X
                ctx = ctx + ((stmt, "orelse"),)
        elif isinstance(stmt, (cst.For, cst.While)):
            _walk_block(stmt.body, ctx + ((stmt, "loop"),), out, line_of)
            if stmt.orelse is not None:
                _walk_block(stmt.orelse.body, ctx + ((stmt, "loop-else"),), out, line_of)
        elif isinstance(stmt, cst.Try):
            inner = ctx + ((stmt, "try"),)
            for part in (stmt.body, *(h.body for h in stmt.handlers),
                         stmt.orelse.body if stmt.orelse else None,
                         stmt.finalbody.body if stmt.finalbody else None):
                if part is not None:
                    _walk_block(part, inner, out, line_of)
        elif isinstance(stmt, cst.With):
            _walk_block(stmt.body, ctx + ((stmt, "with"),), out, line_of)


def _is_policy_exit(stmt: cst.If) -> bool:
    if stmt.orelse is not None or policy_test(stmt.test) is None:
        return False
    body = stmt.body.body
    last = body[-1] if body else None
    if isinstance(last, cst.SimpleStatementLine):
        last = last.body[-1]
    return isinstance(last, (cst.Return, cst.Raise))


def _walk_if(stmt: cst.If, ctx: Ctx, out: list[StmtRec], line_of: LineOf) -> None:
    _walk_block(stmt.body, ctx + ((stmt, "body"),), out, line_of)
    orelse = stmt.orelse
    if isinstance(orelse, cst.If):
        inner_ctx = ctx + ((stmt, "orelse"),)
        out.append(StmtRec(orelse, orelse, stmt, inner_ctx, line_of(orelse)))
        _walk_if(orelse, inner_ctx, out, line_of)
    elif isinstance(orelse, cst.Else):
        _walk_block(orelse.body, ctx + ((stmt, "orelse"),), out, line_of)
