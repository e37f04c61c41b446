"""Pass 4: the pool-transfer guard(s) and whether each can take effect.

Inputs: the parsed method, its `Body`, `Roles` and `ReduceSite`. Output: every
statement that forces something to "no" on a `pool_transfers_done` check, as a
`Guard` with its key and the placement problems that keep it from working.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Optional

import libcst as cst

from lint.analysis.body import Body, StmtRec, bound_names, covered, single_target
from lint.analysis.reduce import ReduceSite
from lint.analysis.roles import Roles, done_polarities
from lint.cstutil import POLICIES, VOTING_POLICIES, and_operands, is_false_constant, names_read
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
    key: Optional[str]
    key_kind: str  # "predicate" | "vote" | "other" | "none"
    line: int
    col: int
    relocatable: bool
    problems: list[Problem] = field(default_factory=list)

    def holds(self, rec: StmtRec) -> bool:
        return rec is self.rec or rec.inside(self.rec.node)


PLACEMENT_LABELS = {
    "bypass": "bypassed by an earlier return",
    "after-reduce": "after the cross-rank reduce",
    "return-skips-reduce": "early return before the reduce",
    "used-before": "after the predicate is already used",
    "rebound": "before the predicate is re-bound",
    "coverage": "only on some policy paths",
}


def find_guards(parsed: ParsedMethod, body: Body, roles: Roles,
                reduce: Optional[ReduceSite]) -> list[Guard]:
    finder = _Finder(parsed, body, roles)
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


def best_guard(guards: list[Guard]) -> Optional[Guard]:
    if not guards:
        return None
    return max(guards, key=lambda g: (g.key_kind == "predicate") * 2 + (not g.problems))


class _Finder:
    def __init__(self, parsed: ParsedMethod, body: Body, roles: Roles) -> None:
        self.parsed, self.body, self.roles = parsed, body, roles

    def _key_kind(self, key: Optional[str], test_names: set[str]) -> str:
        vote, predicates = self.roles.vote, self.roles.predicates
        if vote is not None and (key == vote or vote in test_names):
            return "vote"
        if key is not None and key in predicates:
            return "predicate"
        if key is None:
            return "predicate" if test_names & predicates else "none"
        return "other"

    def _make(self, rec: StmtRec, form: str, key: Optional[str], test_names: set[str],
              relocatable: bool) -> Guard:
        line, col = self.parsed.loc(rec.node)
        return Guard(rec, form, key, self._key_kind(key, test_names), line, col, relocatable)

    def if_guard(self, rec: StmtRec, node: cst.If) -> Optional[Guard]:
        if not any(done_polarities(node.test, self.roles.done_aliases)):
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
            elif isinstance(small, cst.Assign) and is_false_constant(small.value) and single_target(small):
                targets.append(single_target(small) or "")
            elif not isinstance(small, (cst.Pass, cst.Expr)):
                return None
        if not targets and not returns:
            return None
        test_names = names_read(node.test)
        in_block = isinstance(rec.block, cst.IndentedBlock)
        if targets:
            key = next((t for t in targets if t in self.roles.predicates), targets[0])
            return self._make(rec, "if-assign", key, test_names, in_block)
        return self._make(rec, "if-return", None, test_names, in_block)

    def assign_guard(self, rec: StmtRec, node: cst.Assign) -> Optional[Guard]:
        target = single_target(node)
        operands = and_operands(node.value)
        if target is None or not operands:
            return None
        aliases = self.roles.done_aliases
        if not any(any(not neg for neg in done_polarities(o, aliases)) for o in operands):
            return None
        self_ref = any(isinstance(o, cst.Name) and o.value == target for o in operands)
        relocatable = self_ref and _alone_in_block(rec)
        return self._make(rec, "assign", target, set(), relocatable)

    def augassign_guard(self, rec: StmtRec, node: cst.AugAssign) -> Optional[Guard]:
        target = single_target(node)
        polarities = done_polarities(node.value, self.roles.done_aliases)
        if target is None or not polarities or all(polarities):
            return None
        return self._make(rec, "augassign", target, set(), _alone_in_block(rec))


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
    if guard.key_kind == "predicate" and guard.key is not None:
        problems.extend(_predicate_order(guard, guard.key, body, roles))
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
