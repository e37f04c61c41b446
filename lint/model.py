"""Normalized analysis of one `can_terminate_prefetch`-style method.

The analysis names the roles each local plays (completion predicate, vote,
terminated flag), finds the pool-transfer guard(s), the cross-rank reduce, the
policy branches and the combine step, and condenses all of it into a few
*features* whose values do not depend on spelling. Rules read the analysis;
they never look at raw syntax themselves.
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass, field
from typing import Iterable, Optional

import libcst as cst

from lint.cstutil import (
    POLICIES,
    VOTING_POLICIES,
    and_operands,
    attributes_named,
    call_name,
    children,
    dotted_name,
    is_false_constant,
    last_part,
    looks_boolean,
    names_read,
    or_operands,
    policy_test,
    reads_completion,
    strip_casts,
    string_value,
    walk,
)
from lint.locate import ast_has_min_cap
from lint.unit import ParsedMethod

DONE = "pool_transfers_done"
_BUILTINS = frozenset(dir(builtins))

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
class Guard:
    rec: StmtRec
    form: str  # "if-assign" | "if-return" | "assign" | "augassign"
    key: Optional[str]
    key_kind: str  # "predicate" | "vote" | "other" | "none"
    line: int
    col: int
    relocatable: bool
    problems: list[tuple[str, str, int]] = field(default_factory=list)  # (kind, message, line)


@dataclass
class Reduce:
    call: cst.Call
    rec: StmtRec
    line: int
    op: str
    payload: Optional[list[str]]
    payload_line: int
    slot_names: dict[str, int]
    slot_containers: set[str]


@dataclass
class Feature:
    value: Optional[str]  # None: not applicable to this implementation
    line: int


PLACEMENT_LABELS = {
    "bypass": "bypassed by an earlier return",
    "after-reduce": "after the cross-rank reduce",
    "return-skips-reduce": "early return before the reduce",
    "used-before": "after the predicate is already used",
    "rebound": "before the predicate is re-bound",
    "coverage": "only on some policy paths",
}
KEY_LABELS = {
    "predicate": "completion predicate",
    "vote": "the vote",
    "none": "transfer state only",
}
FEATURE_NAMES = (
    "policies",
    "guard",
    "guard-key",
    "guard-placement",
    "combine",
    "reduce-op",
    "reduce-payload",
    "timeout-cap",
)


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


def _walk_block(block: cst.CSTNode, ctx: Ctx, out: list[StmtRec], line_of) -> None:
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
            _walk_block(stmt.body, inner, out, line_of)
            for handler in stmt.handlers:
                _walk_block(handler.body, inner, out, line_of)
            if stmt.orelse is not None:
                _walk_block(stmt.orelse.body, inner, out, line_of)
            if stmt.finalbody is not None:
                _walk_block(stmt.finalbody.body, inner, out, line_of)
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


def _walk_if(stmt: cst.If, ctx: Ctx, out: list[StmtRec], line_of) -> None:
    _walk_block(stmt.body, ctx + ((stmt, "body"),), out, line_of)
    orelse = stmt.orelse
    if isinstance(orelse, cst.If):
        inner_ctx = ctx + ((stmt, "orelse"),)
        out.append(StmtRec(orelse, orelse, stmt, inner_ctx, line_of(orelse)))
        _walk_if(orelse, inner_ctx, out, line_of)
    elif isinstance(orelse, cst.Else):
        _walk_block(orelse.body, ctx + ((stmt, "orelse"),), out, line_of)


def _bound_names(node: cst.CSTNode) -> list[str]:
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


def _single_target(node: cst.CSTNode) -> Optional[str]:
    if isinstance(node, cst.Assign) and len(node.targets) == 1:
        target = node.targets[0].target
        return target.value if isinstance(target, cst.Name) else None
    if isinstance(node, (cst.AnnAssign, cst.AugAssign)) and isinstance(node.target, cst.Name):
        return node.target.value
    return None


class MethodAnalysis:
    """Everything the rules need to know about one termination method."""

    def __init__(self, parsed: ParsedMethod, path: str, reduce_calls: Iterable[str],
                 lines: Optional[list[str]] = None) -> None:
        self.parsed = parsed
        self.lines = lines or []
        self.site = parsed.site
        self.path = path
        self.func = parsed.func
        self.qualname = parsed.site.qualname
        self.def_line = parsed.line(parsed.func.name)
        self.def_col = self.column_of_line(self.def_line)
        self.reduce_calls = [tuple(r.split(".")) for r in reduce_calls]
        self.op_param = self._op_param()
        self.skip_reason = self._skip_reason()
        self.recs: list[StmtRec] = []
        _walk_block(self.func.body, (), self.recs, parsed.line)
        self.bindings: dict[str, list[StmtRec]] = {}
        for rec in self.recs:
            for name in _bound_names(rec.node):
                self.bindings.setdefault(name, []).append(rec)
        self.returns = [r for r in self.recs if isinstance(r.node, cst.Return)]
        self.terminated = self._find_terminated()
        self.done_aliases = self._find_done_aliases()
        self.reduce: Optional[Reduce] = None
        self.vote = self._find_vote_from_return()
        if self.vote is not None and self._binds_completion(self.vote):
            self.vote = None  # the method returns its completion predicate directly
        self.reduce = self._find_reduce()
        if self.vote is None:
            self.vote = self._find_vote_fallback()
            if self.vote is not None:
                self.reduce = self._find_reduce()  # normalize the payload with the vote known
        self.predicates = self._find_predicates()
        self.guards = self._find_guards()
        for guard in self.guards:
            guard.problems = self._guard_problems(guard)
        self.guard = self._best_guard()
        self.policies = self._find_policies()
        self.combine = self._find_combine()
        self.timeout_cap = self._find_timeout_cap()
        self.features = self._features()

    def column_of_line(self, line: int) -> int:
        """1-based column of the first non-blank character on a file line."""
        if 1 <= line <= len(self.lines):
            text = self.lines[line - 1]
            return len(text) - len(text.lstrip()) + 1
        return 1

    # ----------------------------------------------------------------- roles
    def _op_param(self) -> Optional[str]:
        params = [p.name.value for p in (*self.func.params.posonly_params, *self.func.params.params)]
        if params and params[0] in ("self", "cls"):
            params = params[1:]
        return params[0] if params else None

    def _skip_reason(self) -> Optional[str]:
        """Abstract stubs and pure delegations hold no logic of their own."""
        for dec in self.func.decorators:
            target = dec.decorator.func if isinstance(dec.decorator, cst.Call) else dec.decorator
            if last_part(dotted_name(target)) == "abstractmethod":
                return "abstract"
        if not isinstance(self.func.body, cst.IndentedBlock):
            return None
        smalls: list[cst.CSTNode] = []
        for stmt in self.func.body.body:
            if not isinstance(stmt, cst.SimpleStatementLine):
                return None
            smalls.extend(stmt.body)
        for small in smalls:
            if isinstance(small, (cst.Pass, cst.Raise)):
                continue
            if isinstance(small, cst.Expr) and isinstance(
                small.value, (cst.Ellipsis, cst.SimpleString, cst.ConcatenatedString)
            ):
                continue
            if isinstance(small, cst.Return) and _is_delegation(small.value, self.site.method):
                continue
            return None
        return "abstract or delegating"

    def _find_terminated(self) -> Optional[str]:
        firsts: list[tuple[int, str]] = []
        for name, recs in self.bindings.items():
            value = recs[0].value()
            if value is not None and attributes_named(value, "terminated"):
                firsts.append((recs[0].line, name))
        return min(firsts)[1] if firsts else None

    def _find_done_aliases(self) -> dict[str, bool]:
        """Locals that only ever hold the done flag (or "transfers pending").

        Value: True when the local holds the flag's negation. A local that is
        also bound to something else (the vote, the predicate) is not an alias.
        """
        aliases: dict[str, bool] = {}
        for name, recs in self.bindings.items():
            polarity: Optional[bool] = None
            for rec in recs:
                value = rec.value()
                if not isinstance(rec.node, (cst.Assign, cst.AnnAssign)) or value is None:
                    break
                polarities = _done_polarities(value, {})
                if not polarities or name in names_read(value) or reads_completion(value):
                    break
                polarity = polarities[0]
            else:
                if polarity is not None:
                    aliases[name] = polarity
        return aliases

    def _find_vote_from_return(self) -> Optional[str]:
        body = self.func.body
        if not isinstance(body, cst.IndentedBlock) or not body.body:
            return None
        last = body.body[-1]
        if not (isinstance(last, cst.SimpleStatementLine) and isinstance(last.body[-1], cst.Return)):
            return None
        value = last.body[-1].value
        if isinstance(value, cst.Name) and value.value not in ("True", "False"):
            return value.value
        operands = or_operands(value) if value is not None else None
        if operands:
            names = [o.value for o in operands if isinstance(o, cst.Name) and o.value != self.terminated]
            if names:
                return names[0]
        return None

    def _binds_completion(self, name: str) -> bool:
        return any(
            reads_completion(rec.value()) and VOTING_POLICIES <= covered(rec.ctx)
            for rec in self.bindings.get(name, [])
        )

    def _find_vote_fallback(self) -> Optional[str]:
        if self.reduce is not None:
            arg = self._payload_elements(self.reduce.call)
            for element in arg or []:
                element = strip_casts(element)
                if (
                    isinstance(element, cst.BinaryOperation)
                    and isinstance(element.operator, cst.Subtract)
                    and isinstance(element.left, cst.Integer)
                    and element.left.value == "1"
                ):
                    inner = strip_casts(element.right)
                    if isinstance(inner, cst.Name):
                        return inner.value
        for rec in self.recs:
            if covered(rec.ctx) <= {"wait_complete"} and covered(rec.ctx):
                target = _single_target(rec.node)
                if target:
                    return target
        return None

    def _find_predicates(self) -> set[str]:
        excluded = {self.vote, self.terminated, self.op_param, "self"}
        if self.reduce is not None:
            excluded |= set(self.reduce.slot_names) | self.reduce.slot_containers
        candidates: set[str] = set()
        changed = True
        while changed:
            changed = False
            for name, recs in self.bindings.items():
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
            for rec in self.bindings[name]:
                value = rec.value()
                if (
                    value is not None
                    and looks_boolean(value)
                    and VOTING_POLICIES <= covered(rec.ctx)
                    and (reads_completion(value) or names_read(value) & candidates)
                ):
                    predicates.add(name)
                    break
        return predicates

    # ----------------------------------------------------------------- guard
    def _find_guards(self) -> list[Guard]:
        guards: list[Guard] = []
        for rec in self.recs:
            node = rec.node
            if isinstance(node, cst.If):
                guard = self._if_guard(rec, node)
            elif isinstance(node, cst.Assign):
                guard = self._assign_guard(rec, node)
            elif isinstance(node, cst.AugAssign) and isinstance(node.operator, cst.BitAndAssign):
                guard = self._augassign_guard(rec, node)
            else:
                guard = None
            if guard is not None:
                guards.append(guard)
        return guards

    def _key_kind(self, key: Optional[str], test_names: set[str]) -> str:
        if self.vote is not None and (key == self.vote or self.vote in test_names):
            return "vote"
        if key is not None and key in self.predicates:
            return "predicate"
        if key is None:
            return "predicate" if test_names & self.predicates else "none"
        return "other"

    def _make_guard(self, rec: StmtRec, form: str, key: Optional[str], test_names: set[str],
                    relocatable: bool) -> Guard:
        line, col = self.parsed.loc(rec.node)
        return Guard(rec, form, key, self._key_kind(key, test_names), line, col, relocatable)

    def _if_guard(self, rec: StmtRec, node: cst.If) -> Optional[Guard]:
        polarities = _done_polarities(node.test, self.done_aliases)
        if not any(polarities):
            return None
        body = node.body.body
        smalls: list[cst.CSTNode] = []
        for stmt in body:
            if isinstance(stmt, cst.SimpleStatementLine):
                smalls.extend(stmt.body)
            elif isinstance(stmt, cst.BaseSmallStatement):
                smalls.append(stmt)
            else:
                return None
        targets: list[str] = []
        returns = False
        for small in smalls:
            if isinstance(small, cst.Return) and is_false_constant(small.value):
                returns = True
            elif isinstance(small, cst.Assign) and is_false_constant(small.value) and _single_target(small):
                targets.append(_single_target(small) or "")
            elif not isinstance(small, (cst.Pass, cst.Expr)):
                return None
        if not targets and not returns:
            return None
        test_names = names_read(node.test)
        in_block = isinstance(rec.block, cst.IndentedBlock)
        if targets:
            key = next((t for t in targets if t in self.predicates), targets[0])
            return self._make_guard(rec, "if-assign", key, test_names, in_block)
        return self._make_guard(rec, "if-return", None, test_names, in_block)

    def _assign_guard(self, rec: StmtRec, node: cst.Assign) -> Optional[Guard]:
        target = _single_target(node)
        operands = and_operands(node.value)
        if target is None or not operands:
            return None
        if not any(any(not neg for neg in _done_polarities(o, self.done_aliases)) for o in operands):
            return None
        self_ref = any(isinstance(o, cst.Name) and o.value == target for o in operands)
        relocatable = self_ref and isinstance(rec.owner, cst.SimpleStatementLine) and len(
            rec.owner.body) == 1 and isinstance(rec.block, cst.IndentedBlock)
        return self._make_guard(rec, "assign", target, set(), relocatable)

    def _augassign_guard(self, rec: StmtRec, node: cst.AugAssign) -> Optional[Guard]:
        target = _single_target(node)
        polarities = _done_polarities(node.value, self.done_aliases)
        if target is None or not polarities or all(polarities):
            return None
        relocatable = isinstance(rec.owner, cst.SimpleStatementLine) and len(
            rec.owner.body) == 1 and isinstance(rec.block, cst.IndentedBlock)
        return self._make_guard(rec, "augassign", target, set(), relocatable)

    def _in_guard(self, rec: StmtRec, guard: Guard) -> bool:
        return rec is guard.rec or rec.inside(guard.rec.node)

    def _guard_problems(self, guard: Guard) -> list[tuple[str, str, int]]:
        problems: list[tuple[str, str, int]] = []
        paths = covered(guard.rec.ctx)
        ancestors = {id(node) for node, _ in guard.rec.ctx}
        for ret in self.returns:
            if ret.line >= guard.line or self._in_guard(ret, guard):
                continue
            if is_false_constant(ret.node.value):  # type: ignore[union-attr]
                continue
            reach = covered(ret.ctx) & VOTING_POLICIES
            if reach:
                problems.append((
                    "bypass",
                    f"the return at line {ret.line} on the {_paths(reach)} path runs "
                    f"before the guard and bypasses it",
                    ret.line,
                ))
                break
        reduce = self.reduce
        if reduce is not None and guard.line > reduce.line:
            problems.append((
                "after-reduce",
                f"the guard runs after the cross-rank reduce at line {reduce.line}: "
                f"peers decide without this rank's guard",
                guard.line,
            ))
        if guard.form == "if-return" and reduce is not None and reduce.line > guard.line:
            problems.append((
                "return-skips-reduce",
                f"the guard returns before the cross-rank reduce at line {reduce.line}: "
                f"this rank would skip the collective its peers still run",
                guard.line,
            ))
        if guard.key_kind == "predicate" and guard.key is not None:
            binds = [b for b in self.bindings.get(guard.key, []) if not self._in_guard(b, guard)]
            later = [b.line for b in binds if b.line > guard.line]
            before = [b.line for b in binds if b.line <= guard.line]
            last_bind = max(before) if before else 0
            for rec in self.recs:
                if not (last_bind < rec.line < guard.line) or self._in_guard(rec, guard):
                    continue
                if id(rec.node) in ancestors or not self._decides(rec):
                    continue
                if guard.key in names_read(rec.value()):
                    problems.append((
                        "used-before",
                        f"'{guard.key}' is already used at line {rec.line}, before the guard, "
                        f"so that vote ignores it",
                        rec.line,
                    ))
                    break
            if later:
                problems.append((
                    "rebound",
                    f"'{guard.key}' is bound again at line {later[0]}, after the guard, "
                    f"which discards it",
                    later[0],
                ))
        missing = VOTING_POLICIES - paths
        if missing:
            problems.append((
                "coverage",
                f"the guard only runs on the {_paths(paths & VOTING_POLICIES) or 'no voting'} path; "
                f"the {_paths(missing)} path votes without it",
                guard.line,
            ))
        return problems

    def _decides(self, rec: StmtRec) -> bool:
        """Statements whose reads can shape the vote: bindings, returns, and
        conditions that set the vote or return (not, say, a logging branch)."""
        if isinstance(rec.node, (cst.Assign, cst.AnnAssign, cst.AugAssign, cst.Return)):
            return True
        if isinstance(rec.node, (cst.If, cst.While)):
            return any(
                r.inside(rec.node) and (isinstance(r.node, cst.Return) or (
                    self.vote is not None and self.vote in _bound_names(r.node)))
                for r in self.recs
            )
        return False

    def _best_guard(self) -> Optional[Guard]:
        if not self.guards:
            return None
        return max(
            self.guards,
            key=lambda g: (g.key_kind == "predicate") * 2 + (not g.problems),
        )

    # ---------------------------------------------------------------- reduce
    def _is_reduce_call(self, call: cst.Call) -> bool:
        name = call_name(call)
        if not name:
            return False
        parts = tuple(name.split("."))
        return any(parts[-len(r):] == r for r in self.reduce_calls)

    def _payload_elements(self, call: cst.Call) -> Optional[list[cst.BaseExpression]]:
        positional = [a for a in call.args if a.keyword is None]
        if not positional:
            return None
        return self._resolve_list(positional[0].value, self.parsed.line(call), 3)

    def _resolve_list(self, node: cst.BaseExpression, before_line: int,
                      depth: int) -> Optional[list[cst.BaseExpression]]:
        if depth == 0:
            return None
        if isinstance(node, (cst.List, cst.Tuple)):
            return [e.value for e in node.elements]
        if isinstance(node, cst.Call) and node.args:
            return self._resolve_list(node.args[0].value, before_line, depth - 1)
        if isinstance(node, cst.Name):
            recs = [r for r in self.bindings.get(node.value, []) if r.line <= before_line]
            if recs and recs[-1].value() is not None:
                return self._resolve_list(recs[-1].value(), before_line, depth - 1)  # type: ignore[arg-type]
        return None

    def _reduce_op(self, call: cst.Call) -> str:
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value in ("op", "reduce_op"):
                text = string_value(arg.value)
                name = text if text is not None else last_part(dotted_name(arg.value))
                return (name or "unknown").upper()
        name = last_part(call_name(call)).lower()
        for suffix in ("max", "min", "sum"):
            if name.endswith("_" + suffix) or name == suffix:
                return suffix.upper()
        if name == "all_reduce":
            return "SUM"  # torch.distributed's default op
        return "unknown"

    def _normalize(self, element: cst.BaseExpression) -> str:
        element = strip_casts(element)
        if (
            isinstance(element, cst.BinaryOperation)
            and isinstance(element.operator, cst.Subtract)
            and isinstance(element.left, cst.Integer)
            and element.left.value == "1"
        ):
            return "not " + self._normalize(element.right)
        if isinstance(element, cst.UnaryOperation) and isinstance(element.operator, cst.Not):
            return "not " + self._normalize(element.expression)
        if isinstance(element, cst.Name):
            if element.value == self.vote:
                return "vote"
            if element.value == self.terminated:
                return "terminated"
            if element.value in getattr(self, "predicates", set()):
                return "completed"
        if attributes_named(element, "terminated"):
            return "terminated"
        return "other"

    def _find_reduce(self) -> Optional[Reduce]:
        found: list[tuple[StmtRec, cst.Call]] = []
        for rec in self.recs:
            roots = [rec.node] if not isinstance(rec.node, cst.BaseCompoundStatement) else [rec.value()]
            for root in roots:
                if root is None:
                    continue
                for sub in walk(root):
                    if isinstance(sub, cst.Call) and self._is_reduce_call(sub):
                        found.append((rec, sub))
        if not found:
            return None

        def mentions_vote(item: tuple[StmtRec, cst.Call]) -> bool:
            elements = self._payload_elements(item[1]) or []
            names: set[str] = set()
            for element in elements:
                names |= names_read(element)
            return bool(names & {self.vote, self.terminated}) or any(
                attributes_named(e, "terminated") for e in elements)

        rec, call = next((item for item in found if mentions_vote(item)), found[0])
        elements = self._payload_elements(call)
        payload_line = self.parsed.line(call)
        if elements:
            payload_line = self.parsed.line(elements[0])
        payload = [self._normalize(e) for e in elements] if elements is not None else None
        slot_names: dict[str, int] = {}
        containers: set[str] = set()
        if isinstance(rec.node, cst.Assign) and rec.node.value is call:
            target = rec.node.targets[0].target
            if isinstance(target, (cst.Tuple, cst.List)):
                for i, element in enumerate(target.elements):
                    if isinstance(element.value, cst.Name):
                        slot_names[element.value.value] = i
            elif isinstance(target, cst.Name):
                containers.add(target.value)
        positional = [a for a in call.args if a.keyword is None]
        if positional and isinstance(positional[0].value, cst.Name):
            containers.add(positional[0].value.value)
        line = self.parsed.line(call)
        return Reduce(call, rec, line, self._reduce_op(call), payload, payload_line, slot_names, containers)

    # ------------------------------------------------------- combine/policies
    def _classify(self, expr: cst.BaseExpression, seen: Optional[set[str]] = None) -> set[str]:
        """Roles an expression carries: "vote", "terminated" (through reduce slots and locals)."""
        seen = set() if seen is None else seen
        kinds: set[str] = set()
        payload = self.reduce.payload if self.reduce else None
        for sub in walk(expr):
            if isinstance(sub, cst.Name):
                if sub.value == self.vote:
                    kinds.add("vote")
                elif sub.value == self.terminated:
                    kinds.add("terminated")
                elif self.reduce and sub.value in self.reduce.slot_names and payload:
                    kinds.add(_slot_kind(payload, self.reduce.slot_names[sub.value]))
                elif sub.value in self.bindings and sub.value not in seen:
                    # a local holding a reduced slot, e.g. `terminated = states[1] == 1`
                    seen.add(sub.value)
                    for rec in self.bindings[sub.value]:
                        value = rec.value()
                        if value is not None:
                            kinds |= self._classify(value, seen) & {"terminated"}
            elif isinstance(sub, cst.Subscript) and self.reduce and payload:
                base = sub.value
                if isinstance(base, cst.Name) and base.value in self.reduce.slot_containers:
                    index = sub.slice[0].slice if sub.slice else None
                    if isinstance(index, cst.Index) and isinstance(index.value, cst.Integer):
                        kinds.add(_slot_kind(payload, int(index.value.value)))
            elif isinstance(sub, (cst.Attribute, cst.Call)) and attributes_named(sub, "terminated"):
                kinds.add("terminated")
        return kinds

    def _find_combine(self) -> tuple[str, int]:
        for rec in self.recs:
            node = rec.node
            value = rec.value()
            if value is None:
                continue
            target = _single_target(node)
            if isinstance(node, cst.AugAssign) and isinstance(node.operator, cst.BitOrAssign):
                if target == self.vote and "terminated" in self._classify(value):
                    return "vote OR any-terminated", rec.line
                continue
            if isinstance(node, cst.If):
                body_sets_true = any(
                    isinstance(s, cst.SimpleStatementLine) and any(
                        (isinstance(x, cst.Return) and _is_true(x.value))
                        or (isinstance(x, cst.Assign) and _single_target(x) == self.vote
                            and _is_true(x.value))
                        for x in s.body)
                    for s in node.body.body)
                if body_sets_true and self._classify(node.test) == {"terminated"}:
                    return "vote OR any-terminated", rec.line
                continue
            if not (isinstance(node, cst.Return) or (target is not None and target == self.vote)):
                continue
            operands = or_operands(value)
            if not operands:
                continue
            kinds = [self._classify(o) for o in operands]
            if any("vote" in k for k in kinds) and any("terminated" in k and "vote" not in k for k in kinds):
                return "vote OR any-terminated", rec.line
        final = self.returns[-1].line if self.returns else self.def_line
        return "vote only", final

    def _find_policies(self) -> dict[str, int]:
        policies: dict[str, int] = {}
        for rec in self.recs:
            if isinstance(rec.node, cst.If):
                test = policy_test(rec.node.test)
                if test is None:
                    continue
                named = set(test[1])
                branches = [(rec.node, "body")] + ([(rec.node, "orelse")] if rec.node.orelse else [])
                for branch in branches:
                    reach = covered(rec.ctx + (branch,))
                    if len(reach) == 1:  # a branch that handles exactly one policy
                        named |= reach
                for policy in sorted(named):
                    policies.setdefault(policy, rec.line)
        return policies

    def _find_timeout_cap(self) -> tuple[Optional[bool], int]:
        branch = [r for r in self.recs if covered(r.ctx) == {"timeout"}]
        if not branch:
            return None, self.def_line
        roots = [r.value() for r in branch if r.value() is not None]
        seen: set[int] = set()
        pending = list(roots)
        cst_roots: list[cst.CSTNode] = []
        while pending:
            node = pending.pop()
            if node is None or id(node) in seen:
                continue
            seen.add(id(node))
            cst_roots.append(node)
            for name in names_read(node):
                for rec in self.bindings.get(name, []):
                    pending.append(rec.value())
        ast_roots: list[ast.AST] = []
        index = self.site.index
        unknown = False
        for root in cst_roots:
            for sub in walk(root):
                if isinstance(sub, cst.Call):
                    func = sub.func
                    if isinstance(func, cst.Name):
                        if func.value == "min" and len(sub.args) >= 2:
                            return True, branch[0].line
                        if func.value in index.module_functions:
                            ast_roots.append(index.module_functions[func.value])
                        elif func.value not in _BUILTINS:
                            unknown = True
                    elif (isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name)
                          and func.value.value == "self" and func.attr.value not in index.methods):
                        unknown = True  # inherited or injected helper: cannot tell
                if isinstance(sub, cst.Attribute) and isinstance(sub.value, cst.Name) and sub.value.value == "self":
                    attr = sub.attr.value
                    if attr in index.methods:
                        ast_roots.append(index.methods[attr])
                    ast_roots.extend(index.attribute_values.get(attr, []))
        capped = ast_has_min_cap(ast_roots, index) if ast_roots else False
        if capped:
            return True, branch[0].line
        return (None if unknown or capped is None else False), branch[0].line

    # -------------------------------------------------------------- features
    def _features(self) -> dict[str, Feature]:
        first_policy = min(self.policies.values()) if self.policies else self.def_line
        feats = {
            "policies": Feature(", ".join(p for p in POLICIES if p in self.policies) or "none", first_policy),
        }
        guard = self.guard
        if guard is None:
            feats["guard"] = Feature("missing", self.def_line)
            feats["guard-key"] = Feature(None, self.def_line)
            feats["guard-placement"] = Feature(None, self.def_line)
        else:
            feats["guard"] = Feature("present", guard.line)
            feats["guard-key"] = Feature(KEY_LABELS.get(guard.key_kind, f"local '{guard.key}'"), guard.line)
            if guard.problems:
                kind, _, line = guard.problems[0]
                feats["guard-placement"] = Feature(PLACEMENT_LABELS[kind], line)
            else:
                feats["guard-placement"] = Feature("effective", guard.line)
        combine, line = self.combine
        feats["combine"] = Feature(combine, line)
        if self.reduce is None:
            feats["reduce-op"] = Feature("no reduce", self.def_line)
            feats["reduce-payload"] = Feature(None, self.def_line)
        else:
            feats["reduce-op"] = Feature(self.reduce.op, self.reduce.line)
            payload = self.reduce.payload
            shown = "unresolved" if payload is None else "[" + ", ".join(
                "1-" + p[4:] if p.startswith("not ") else p for p in payload) + "]"
            feats["reduce-payload"] = Feature(shown, self.reduce.payload_line)
        cap, line = self.timeout_cap
        feats["timeout-cap"] = Feature(None if cap is None else ("capped by a max" if cap else "uncapped"), line)
        return feats


def _slot_kind(payload: list[str], index: int) -> str:
    if 0 <= index < len(payload):
        kind = payload[index]
        return kind[4:] if kind.startswith("not ") else kind
    return "other"


def _is_true(node: Optional[cst.CSTNode]) -> bool:
    return isinstance(node, cst.Name) and node.value == "True"


def _is_delegation(value: Optional[cst.CSTNode], method: str) -> bool:
    """`return super().m(...)` or `return <something>.m(...)` for the same method."""
    if not (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)):
        return False
    base = value.func.value
    is_super = isinstance(base, cst.Call) and dotted_name(base.func) == "super"
    return is_super or value.func.attr.value == method


def _paths(policies: Iterable[str]) -> str:
    return "/".join(p for p in POLICIES if p in set(policies))


def _done_polarities(expr: cst.CSTNode, aliases: dict[str, bool], negated: bool = False) -> list[bool]:
    """For each read of the done flag in `expr`: True when it is read negated."""
    if isinstance(expr, cst.Attribute) and DONE in expr.attr.value:
        return [negated]
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value == "getattr":
        key = string_value(expr.args[1].value) if len(expr.args) >= 2 else None
        if key is not None and DONE in key:
            return [negated]
    if isinstance(expr, cst.Name) and expr.value in aliases:
        return [negated != aliases[expr.value]]
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Not):
        return _done_polarities(expr.expression, aliases, not negated)
    if isinstance(expr, cst.Comparison) and len(expr.comparisons) == 1:
        target = expr.comparisons[0]
        constant = target.comparator
        if isinstance(constant, cst.Name) and constant.value in ("True", "False"):
            flip = (constant.value == "False") != isinstance(target.operator, (cst.NotEqual, cst.IsNot))
            return _done_polarities(expr.left, aliases, negated != flip)
    out: list[bool] = []
    for child in children(expr):
        out.extend(_done_polarities(child, aliases, negated))
    return out
