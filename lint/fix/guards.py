"""Plans for the guard findings: insert a missing guard, re-key or move one.

Which form a fix writes depends on the implementation:

* fenced (configured `fenced = true`: its commit clamps to every pool and frees
  slots only after their IO ends) -> the spec's form: the completion predicate
  is forced to no, right after it is bound;
* otherwise -> upstream's form: the vote is forced to no when KV is complete
  and pool transfers are pending, after the policy branches and before the
  reduce. Safe without the fence, at the cost HC107 names.

A plan is an `Edits`; a fix that cannot be made safely is a one-line reason.
"""

from __future__ import annotations

from typing import Optional, Union

import libcst as cst

from lint.analysis import Guard, MethodAnalysis, StmtRec
from lint.analysis.body import covered
from lint.analysis.guard import COMPLETION
from lint.cstutil import VOTING_POLICIES, dotted_name, is_false_constant, policy_test, walk
from lint.fix.edits import Edits
from lint.fix.spelling import Evidence, Spelling, describe, object_kind

COMPLETION_COMMENT = "# KV alone is not complete while extra-pool transfers still run."
VOTE_COMMENT = "# Vote no while KV is complete but extra-pool transfers still run."

Plan = Union[Edits, str]  # edits, or why no fix is offered


def plain_bindings(method: MethodAnalysis, name: str) -> list[StmtRec]:
    return [r for r in method.body.bindings.get(name, [])
            if not any(g.holds(r) for g in method.guards)]


def predicate(method: MethodAnalysis) -> Optional[str]:
    """The predicate to key on: the one bound last (closest to the vote)."""
    best: Optional[tuple[int, str]] = None
    for name in method.predicates:
        lines = [r.line for r in plain_bindings(method, name)]
        if lines and (best is None or max(lines) > best[0]):
            best = (max(lines), name)
    return best[1] if best else None


def _lift(method: MethodAnalysis, rec: StmtRec, through_policies: bool) -> Optional[StmtRec]:
    """The statement that holds `rec` in an enclosing block: out of non-policy
    compound statements (and out of policy branches too when asked)."""
    current = rec
    while True:
        # `if policy == X: return` narrows what follows without enclosing it
        enclosing = [anc for anc, branch in current.ctx
                     if not (branch == "orelse" and isinstance(anc, cst.If) and anc.orelse is None)]
        if not enclosing:
            break
        ancestor = enclosing[-1]
        if not through_policies and isinstance(ancestor, cst.If) and policy_test(ancestor.test) is not None:
            break
        parent = method.body.rec_of(ancestor)
        if parent is None:
            return None
        current = parent
    return current if isinstance(current.block, cst.IndentedBlock) else None


def predicate_anchor(method: MethodAnalysis, name: str) -> Optional[StmtRec]:
    """Where the spec's guard goes: after the predicate's last binding."""
    binds = plain_bindings(method, name)
    return _lift(method, max(binds, key=lambda r: r.line), False) if binds else None


def vote_anchor(method: MethodAnalysis) -> Optional[StmtRec]:
    """Where upstream's guard goes: after the statement (at the method's top
    level) that last sets the vote on a voting path before the reduce."""
    vote = method.vote
    if vote is None:
        return None
    if method.reduce is not None:
        end = method.reduce.line
    else:
        end = method.body.returns[-1].line if method.body.returns else 10**9
    binds = [r for r in plain_bindings(method, vote)
             if r.line < end and covered(r.ctx) & VOTING_POLICIES]
    return _lift(method, max(binds, key=lambda r: r.line), True) if binds else None


def progress_object(method: MethodAnalysis, name: str) -> Optional[str]:
    """What the predicate reads `completed_tokens` from (`operation`, a snapshot, ...)."""
    for rec in plain_bindings(method, name):
        value = rec.value()
        for sub in walk(value) if value is not None else ():
            if isinstance(sub, cst.Attribute) and sub.attr.value == "completed_tokens":
                found = dotted_name(sub.value)
                if found:
                    return found
    return method.op_param


class _Rename(cst.CSTTransformer):
    def __init__(self, old: set[str], new: str) -> None:
        self.old, self.new = old, new

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.Name:
        return updated_node.with_changes(value=self.new) if updated_node.value in self.old else updated_node

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.Attribute:
        return updated_node.with_changes(attr=original_node.attr)

    def leave_Arg(self, original_node: cst.Arg, updated_node: cst.Arg) -> cst.Arg:
        return updated_node.with_changes(keyword=original_node.keyword)


class _ForceTo(cst.CSTTransformer):
    """In a guard body: `return False` / `x = False` become `<name> = False`."""

    def __init__(self, name: str) -> None:
        self.name = name

    def _assign(self) -> cst.Assign:
        return cst.Assign(targets=[cst.AssignTarget(cst.Name(self.name))], value=cst.Name("False"))

    def leave_Return(self, original_node: cst.Return, updated_node: cst.Return):
        return self._assign() if is_false_constant(updated_node.value) else updated_node

    def leave_Assign(self, original_node: cst.Assign, updated_node: cst.Assign) -> cst.Assign:
        if is_false_constant(updated_node.value) and len(updated_node.targets) == 1:
            return updated_node.with_changes(targets=[cst.AssignTarget(cst.Name(self.name))])
        return updated_node


class GuardFixer:
    """Plans the fix for one method's guard findings."""

    def __init__(self, method: MethodAnalysis, evidence: Evidence) -> None:
        self.method, self.fenced, self.evidence = method, method.fenced, evidence

    def _spelling(self, pred: str) -> Union[Spelling, str]:
        method = self.method
        obj = progress_object(method, pred)
        kind = object_kind(method, obj) if obj else None
        if obj is None or kind is None:
            return f"cannot tell what '{obj or pred}' is, so which pool fields it has"
        spelling = self.evidence.spelling(kind, method)
        if spelling is None:
            return (f"no read of {method.flag} on {describe(kind, obj)} in this method, its file, "
                    f"the files linted with it or the configured implementations; add the guard by hand")
        return spelling

    def _new_guard(self, pred: str, forced: str, comment: str) -> Union[cst.BaseStatement, str]:
        spelling = self._spelling(pred)
        if isinstance(spelling, str):
            return spelling
        obj = progress_object(self.method, pred)
        assert obj is not None
        module = self.method.parsed.module
        code = f"if {spelling.condition(pred, obj)}:\n{module.default_indent}{forced} = False\n"
        stmt = cst.parse_statement(code, config=module.config_for_parsing)
        return stmt.with_changes(leading_lines=(cst.EmptyLine(comment=cst.Comment(comment)),))

    def insert(self) -> Plan:
        """HC101: a guard where there is none."""
        method = self.method
        pred = predicate(method)
        if pred is None:
            return "no completion predicate local to key the guard on"
        if self.fenced:
            anchor, forced, comment = predicate_anchor(method, pred), pred, COMPLETION_COMMENT
            what = f"inserted guard on '{pred}'"
        else:
            anchor, forced, comment = vote_anchor(method), method.vote, VOTE_COMMENT
            what = (f"inserted upstream's guard forcing '{forced}' (see HC107; with "
                    f"fenced = true the completion form is inserted instead)")
        if anchor is None or forced is None:
            return ("no statement to place the guard after" if self.fenced else
                    "the vote is not one local set before the reduce, so upstream's guard has no place; "
                    "with fenced = true the completion form is inserted instead")
        stmt = self._new_guard(pred, forced, comment)
        if isinstance(stmt, str):
            return stmt
        edits = Edits()
        edits.inserts[id(anchor.owner)] = [stmt]
        edits.notes.append(f"{method.qualname}: {what}")
        return edits

    def rework(self, guard: Guard, code: str) -> Plan:
        """HC102/HC103/HC107: move or re-key an existing guard."""
        method = self.method
        pred = predicate(method)
        if pred is None:
            return "no completion predicate local to key the guard on"
        if code == "HC107" and not self.fenced:
            return ("upstream's form is kept: the completion form needs the commit clamped to every pool; "
                    "set fenced = true for this implementation once it is")
        if any(p.kind == "bypass" for p in guard.problems) and code == "HC103":
            return "an earlier return bypasses the guard; restructure the early return by hand"
        if self.fenced or guard.shape == COMPLETION:
            return self._to_completion(guard, pred)
        return self._to_vote_forcing(guard, pred)

    def _move(self, guard: Guard, anchor: Optional[StmtRec], stmt: cst.BaseStatement, note: str) -> Plan:
        if anchor is None:
            return "no statement to place the guard after"
        edits = Edits()
        if guard.statement.owner is anchor.owner:
            return edits
        edits.removes.add(id(guard.statement.owner))
        edits.inserts.setdefault(id(anchor.owner), []).append(stmt)
        edits.notes.append(f"{self.method.qualname}: {note} after line {anchor.line}")
        return edits

    def _to_completion(self, guard: Guard, pred: str) -> Plan:
        if not guard.relocatable:
            return "the guard shares its line with other statements; move it by hand"
        wrong = {name for name in (guard.target, self.method.vote) if name and name != pred}
        stmt = guard.statement.owner
        renamed = stmt.visit(_Rename(wrong, pred)) if wrong else stmt
        if isinstance(renamed, cst.If):
            renamed = renamed.visit(_ForceTo(pred))
        assert isinstance(renamed, cst.BaseStatement)
        return self._move(guard, predicate_anchor(self.method, pred), renamed, f"moved guard onto '{pred}'")

    def _to_vote_forcing(self, guard: Guard, pred: str) -> Plan:
        method = self.method
        vote = method.vote
        anchor = vote_anchor(method)
        if vote is None or anchor is None:
            return ("the vote is not one local set before the reduce, so upstream's guard has no place; "
                    "with fenced = true the completion form is used instead")
        stmt = guard.statement.owner
        if isinstance(stmt, cst.If) and guard.relocatable and guard.form.startswith("if-"):
            # the vote in the condition becomes the predicate; whatever it forced becomes the vote
            reworked = stmt.visit(_Rename({vote}, pred)).visit(_ForceTo(vote))
            assert isinstance(reworked, cst.If)
            test = reworked.test
            if guard.condition == "transfers":
                if not isinstance(test, (cst.BooleanOperation, cst.Comparison, cst.UnaryOperation)) or (
                        isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.Or)):
                    test = test.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
                test = cst.BooleanOperation(left=cst.Name(pred), operator=cst.And(), right=test)
            new: Union[cst.BaseStatement, str] = reworked.with_changes(test=test)
        else:
            new = self._new_guard(pred, vote, VOTE_COMMENT)
        if isinstance(new, str):
            return new
        edits = Edits()
        edits.removes.add(id(stmt))
        edits.inserts.setdefault(id(anchor.owner), []).append(new)  # type: ignore[arg-type]
        edits.notes.append(f"{method.qualname}: guard conditioned on '{pred}', forcing '{vote}', "
                           f"after line {anchor.line}")
        return edits
