"""Pass 4: the pool-transfer guard(s) and whether each can take effect.

Inputs: the parsed method, its `Body`, `Roles` and `ReduceSite`. Output: every
statement that forces something to "no" on a `pool_transfers_done` check, as a
`Guard` with its key and the placement problems that keep it from working.

Pass 4b (`find_lookalikes`): attributes (or getattr keys) the method reads whose
names look like the completion flag but are not it, as `(name, line)` pairs in
line order with the line of each first read; HC101 names them, since the guard
pass does not see them as the flag.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Optional

import libcst as cst

from lint.analysis.body import Body, StmtRec, bound_names, covered, single_target
from lint.analysis.reduce import ReduceSite
from lint.analysis.roles import Roles, done_polarities
from lint.cstutil import (
    POLICIES,
    VOTING_POLICIES,
    attribute_read,
    is_false_constant,
    is_name,
    names_read,
    operands,
    policy_test,
    reads_completion,
    walk,
)
from lint.pools import looks_like_flag
from lint.protocol import COMPLETION, OTHER_LOCAL, TRANSFERS_ONLY, VOTE_FORCING, VOTE_KEYED
from lint.unit import ParsedMethod


@dataclass
class Problem:
    kind: str
    message: str
    line: int




@dataclass
class Guard:
    rec: StmtRec
    form: str  # "if-assign" | "if-return" | "assign" | "augassign"
    target: Optional[str]  # the local forced to False; None for `return False`
    action: str  # "predicate" | "vote" | "result" | "other"
    condition: str  # "completion" | "vote" | "transfers"
    line: int
    col: int
    relocatable: bool
    problems: list[Problem] = field(default_factory=list)
    # the whole statement a fix moves: the guard, or the `if`s that only wrap it
    outer: Optional[StmtRec] = None

    def holds(self, rec: StmtRec) -> bool:
        return rec is self.rec or rec.inside(self.rec.node)

    @property
    def statement(self) -> StmtRec:
        return self.outer or self.rec

    @property
    def shape(self) -> str:
        if self.action == "predicate":
            return COMPLETION
        if self.action == "other":
            return OTHER_LOCAL
        return {"completion": VOTE_FORCING, "vote": VOTE_KEYED}.get(self.condition, TRANSFERS_ONLY)


PLACEMENT_LABELS = {
    "bypass": "bypassed by an earlier return",
    "after-reduce": "after the cross-rank reduce",
    "return-skips-reduce": "early return before the reduce",
    "used-before": "after the predicate is already used",
    "rebound": "before its target is re-bound",
    "coverage": "only on some policy paths",
}


def find_guards(parsed: ParsedMethod, body: Body, roles: Roles,
                reduce: Optional[ReduceSite]) -> list[Guard]:
    finder = _Finder(parsed, roles, body)
    guards: list[Guard] = []
    for rec in body.recs:
        node = rec.node
        guard: Optional[Guard] = None
        if isinstance(node, cst.If):
            guard = finder.if_guard(rec, node)
        elif isinstance(node, cst.Assign):
            guard = finder.assign_guard(rec, node)
        elif isinstance(node, cst.AugAssign) and isinstance(node.operator, cst.BitAndAssign):
            guard = finder.augassign_guard(rec, node)
        if guard is not None:
            guard.problems = placement_problems(guard, body, roles, reduce)
            guards.append(guard)
    return guards


def find_inert_checks(body: Body, roles: Roles, guards: list[Guard]) -> list[int]:
    """Lines of `if` statements that test "transfers pending" but force nothing to no."""
    lines: list[int] = []
    for rec in body.recs:
        if (isinstance(rec.node, cst.If) and not any(g.rec is rec for g in guards)
                and any(done_polarities(rec.node.test, roles.done_aliases, roles.flag))):
            lines.append(rec.line)
    return lines


def find_lookalikes(parsed: ParsedMethod, body: Body, flag: str) -> tuple[tuple[str, int], ...]:
    found: dict[str, int] = {}
    for rec in body.recs:
        value = rec.value()
        if value is None:
            continue
        for sub in walk(value):
            name = attribute_read(sub)
            if name and name not in found and looks_like_flag(name, flag):
                found[name] = parsed.line(sub)
    return tuple(sorted(found.items(), key=lambda item: item[1]))


def best_guard(guards: list[Guard]) -> Optional[Guard]:
    """The guard the features describe: an effective one in the spec's form first."""
    if not guards:
        return None
    rank = {COMPLETION: 2, VOTE_FORCING: 1}
    return max(guards, key=lambda g: (not g.problems, rank.get(g.shape, 0)))


def _conjuncts(expr: cst.BaseExpression) -> list[cst.BaseExpression]:
    """`a and b` -> [a, b]; `not (a and b)` around the done flag reads as its inside."""
    parts = operands(expr, cst.And)
    if parts is not None:
        return [c for o in parts for c in _conjuncts(o)]
    if (isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Not)
            and operands(expr.expression, cst.And) is not None):
        return _conjuncts(expr.expression)
    return [expr]


def _wrapping_ifs(rec: StmtRec, body: Body) -> Optional[StmtRec]:
    """The outermost plain `if` around `rec` whose only content is `rec`'s chain."""
    current: Optional[StmtRec] = None
    inner: cst.CSTNode = rec.node
    for anc, branch in reversed(rec.ctx):
        if not (isinstance(anc, cst.If) and branch == "body" and anc.orelse is None
                and policy_test(anc.test) is None and len(anc.body.body) == 1 and anc.body.body[0] is inner):
            break
        current, inner = body.rec_of(anc), anc
        if current is None:
            return None
    return current


class _Finder:
    def __init__(self, parsed: ParsedMethod, roles: Roles, body: Body) -> None:
        self.parsed, self.roles, self.body = parsed, roles, body

    def _condition(self, exprs: Iterable[cst.BaseExpression]) -> str:
        """What, besides the done flag, the guard's condition is keyed on."""
        conjuncts = [c for e in exprs for c in _conjuncts(e)]
        predicates, vote = self.roles.predicates, self.roles.vote
        for conj in conjuncts:
            if isinstance(conj, cst.Name) and conj.value in predicates:
                return "completion"
            if reads_completion(conj) and not done_polarities(conj, self.roles.done_aliases, self.roles.flag):
                return "completion"
        if vote is not None and any(isinstance(c, cst.Name) and c.value == vote for c in conjuncts):
            return "vote"
        return "transfers"

    def _action(self, target: Optional[str]) -> str:
        if target is None:
            return "result"
        if target in self.roles.predicates:
            return "predicate"
        return "vote" if target == self.roles.vote else "other"

    def _make(self, rec: StmtRec, form: str, target: Optional[str], condition: str,
              relocatable: bool) -> Guard:
        line, col = self.parsed.loc(rec.node)
        return Guard(rec, form, target, self._action(target), condition, line, col, relocatable)

    def if_guard(self, rec: StmtRec, node: cst.If) -> Optional[Guard]:
        if not any(done_polarities(node.test, self.roles.done_aliases, self.roles.flag)):
            return None
        smalls: list[cst.CSTNode] = []
        for stmt in node.body.body:
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
            elif (isinstance(small, cst.Assign) and len(small.targets) == 1 and is_name(small.targets[0].target)
                  and is_false_constant(small.value)):
                targets.append(single_target(small) or "")
            elif not isinstance(small, (cst.Pass, cst.Expr)):
                return None
        if not targets and not returns:
            return None
        # a nested guard (`if completed and pending_extras: if not done: ...`)
        # is conditioned on the tests around it too
        tests = [node.test] + [anc.test for anc, branch in rec.ctx
                               if isinstance(anc, cst.If) and branch == "body" and policy_test(anc.test) is None]
        condition = self._condition(tests)
        outer = _wrapping_ifs(rec, self.body)
        in_block = isinstance((outer or rec).block, cst.IndentedBlock)
        if targets:
            target = next((t for t in targets if t in self.roles.predicates), targets[0])
            guard = self._make(rec, "if-assign", target, condition, in_block)
        else:
            guard = self._make(rec, "if-return", None, condition, in_block)
        guard.outer = outer
        return guard

    def assign_guard(self, rec: StmtRec, node: cst.Assign) -> Optional[Guard]:
        target = single_target(node)
        parts = operands(node.value, cst.And)
        if target is None or not parts:
            return None
        aliases = self.roles.done_aliases
        if not any(any(not neg for neg in done_polarities(o, aliases, self.roles.flag)) for o in parts):
            return None
        self_ref = any(isinstance(o, cst.Name) and o.value == target for o in parts)
        others = [o for o in parts if not (isinstance(o, cst.Name) and o.value == target)]
        relocatable = self_ref and _alone_in_block(rec)
        return self._make(rec, "assign", target, self._condition(others), relocatable)

    def augassign_guard(self, rec: StmtRec, node: cst.AugAssign) -> Optional[Guard]:
        target = single_target(node)
        polarities = done_polarities(node.value, self.roles.done_aliases, self.roles.flag)
        if target is None or not polarities or all(polarities):
            return None
        return self._make(rec, "augassign", target, self._condition([node.value]), _alone_in_block(rec))


def _alone_in_block(rec: StmtRec) -> bool:
    return (isinstance(rec.owner, cst.SimpleStatementLine) and len(rec.owner.body) == 1
            and isinstance(rec.block, cst.IndentedBlock))


def paths_text(policies: Iterable[str]) -> str:
    return "/".join(p for p in POLICIES if p in set(policies))


def placement_problems(guard: Guard, body: Body, roles: Roles,
                       reduce: Optional[ReduceSite]) -> list[Problem]:
    problems: list[Problem] = []
    for ret in body.returns:
        if ret.line >= guard.line or guard.holds(ret):
            continue
        if is_false_constant(ret.node.value):  # type: ignore[union-attr]
            continue
        reach = covered(ret.ctx) & VOTING_POLICIES
        if reach:
            problems.append(Problem(
                "bypass",
                f"the return at line {ret.line} on the {paths_text(reach)} path runs "
                f"before the guard and bypasses it", ret.line))
            break
    if reduce is not None and guard.line > reduce.line:
        problems.append(Problem(
            "after-reduce",
            f"the guard runs after the cross-rank reduce at line {reduce.line}: "
            f"peers decide without this rank's guard", guard.line))
    if guard.form == "if-return" and reduce is not None and reduce.line > guard.line:
        problems.append(Problem(
            "return-skips-reduce",
            f"the guard returns before the cross-rank reduce at line {reduce.line}: "
            f"this rank would skip the collective its peers still run", guard.line))
    if guard.action == "predicate" and guard.target is not None:
        problems.extend(_predicate_order(guard, guard.target, body, roles))
    elif guard.action == "vote" and guard.target is not None:
        problems.extend(_vote_order(guard, guard.target, body, reduce))
    paths = covered(guard.rec.ctx)
    missing = VOTING_POLICIES - paths
    if missing:
        problems.append(Problem(
            "coverage",
            f"the guard only runs on the {paths_text(paths & VOTING_POLICIES) or 'no voting'} path; "
            f"the {paths_text(missing)} path votes without it", guard.line))
    return problems


def _predicate_order(guard: Guard, key: str, body: Body, roles: Roles) -> list[Problem]:
    """The predicate must not feed the vote before the guard, nor be re-bound after it."""
    problems: list[Problem] = []
    ancestors = {id(node) for node, _ in guard.rec.ctx}
    binds = [b for b in body.bindings.get(key, []) if not guard.holds(b)]
    later = [b.line for b in binds if b.line > guard.line]
    before = [b.line for b in binds if b.line <= guard.line]
    last_bind = max(before) if before else 0
    for rec in body.recs:
        if not (last_bind < rec.line < guard.line) or guard.holds(rec):
            continue
        if id(rec.node) in ancestors or not _decides(rec, body, roles.vote):
            continue
        if key in names_read(rec.value()):
            problems.append(Problem(
                "used-before",
                f"'{key}' is already used at line {rec.line}, before the guard, "
                f"so that vote ignores it", rec.line))
            break
    if later:
        problems.append(Problem(
            "rebound",
            f"'{key}' is bound again at line {later[0]}, after the guard, which discards it",
            later[0]))
    return problems


def _vote_order(guard: Guard, vote: str, body: Body, reduce: Optional[ReduceSite]) -> list[Problem]:
    """A forced "no" must reach the reduce (or the return): a later binding of
    the vote that does not read it (a policy branch after the guard) discards it."""
    end = reduce.line if reduce is not None else float("inf")
    for rec in body.bindings.get(vote, []):
        if guard.line < rec.line < end and not guard.holds(rec) and vote not in names_read(rec.value()):
            return [Problem(
                "rebound",
                f"'{vote}' is bound again at line {rec.line}, after the guard, which discards it",
                rec.line)]
    return []


def _decides(rec: StmtRec, body: Body, vote: Optional[str]) -> bool:
    """Statements whose reads can shape the vote: bindings, returns, and
    conditions that set the vote or return (not, say, a logging branch)."""
    if isinstance(rec.node, (cst.Assign, cst.AnnAssign, cst.AugAssign, cst.Return)):
        return True
    if isinstance(rec.node, (cst.If, cst.While)):
        return any(
            r.inside(rec.node) and (isinstance(r.node, cst.Return) or (
                vote is not None and vote in bound_names(r.node)))
            for r in body.recs
        )
    return False
