"""Pass 5: the protocol's shape as spelling-free features.

Inputs: everything the earlier passes found. Output: the handled policies, how
the vote is combined with "already terminated", whether the timeout is capped,
and the `Feature` values the drift rule compares.
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass
from typing import Optional

import libcst as cst

from lint.analysis.body import Body, covered, single_target
from lint.analysis.guard import PLACEMENT_LABELS, Guard
from lint.analysis.reduce import ReduceSite
from lint.analysis.roles import Roles
from lint.cstutil import (POLICIES, as_cst, attributes_named, is_name, names_read, one_minus, operands, policy_test,
                          strip_casts, walk)
from lint.locate import ClassIndex
from lint.protocol import COMPLETION, TRANSFERS_ONLY, VOTE_FORCING, VOTE_KEYED

_BUILTINS = frozenset(dir(builtins))

KEY_LABELS = {
    COMPLETION: "completion predicate",
    VOTE_FORCING: "the vote, on completion",
    VOTE_KEYED: "the vote",
    TRANSFERS_ONLY: "transfer state only",
}


@dataclass
class Feature:
    value: Optional[str]  # None: not applicable to this implementation
    line: int


def normalize(element: cst.BaseExpression, roles: Roles) -> str:
    """A payload element as 'vote', 'terminated', 'completed', 'not ...' or 'other'."""
    inner = one_minus(element)
    if inner is not None:
        return "not " + normalize(inner, roles)
    element = strip_casts(element)
    if isinstance(element, cst.UnaryOperation) and isinstance(element.operator, cst.Not):
        return "not " + normalize(element.expression, roles)
    if isinstance(element, cst.Name):
        if element.value == roles.vote:
            return "vote"
        if element.value == roles.terminated:
            return "terminated"
        if element.value in roles.predicates:
            return "completed"
    if attributes_named(element, "terminated"):
        return "terminated"
    return "other"


def payload(reduce: Optional[ReduceSite], roles: Roles) -> Optional[list[str]]:
    if reduce is None or reduce.elements is None:
        return None
    return [normalize(e, roles) for e in reduce.elements]


def _slot_kind(kinds: list[str], index: int) -> str:
    if 0 <= index < len(kinds):
        kind = kinds[index]
        return kind[4:] if kind.startswith("not ") else kind
    return "other"


class _Classifier:
    """Roles an expression carries: "vote", "terminated" (through reduce slots and locals)."""

    def __init__(self, body: Body, roles: Roles, reduce: Optional[ReduceSite],
                 kinds: Optional[list[str]]) -> None:
        self.body, self.roles, self.reduce, self.kinds = body, roles, reduce, kinds

    def __call__(self, expr: cst.BaseExpression, seen: Optional[set[str]] = None) -> set[str]:
        seen = set() if seen is None else seen
        found: set[str] = set()
        reduce, kinds = self.reduce, self.kinds
        for sub in walk(expr):
            if isinstance(sub, cst.Name):
                if sub.value == self.roles.vote:
                    found.add("vote")
                elif sub.value == self.roles.terminated:
                    found.add("terminated")
                elif reduce and kinds and sub.value in reduce.slot_names:
                    found.add(_slot_kind(kinds, reduce.slot_names[sub.value]))
                elif sub.value in self.body.bindings and sub.value not in seen:
                    # a local holding a reduced slot, e.g. `terminated = states[1] == 1`
                    seen.add(sub.value)
                    for rec in self.body.bindings[sub.value]:
                        value = rec.value()
                        if value is not None:
                            found |= self(value, seen) & {"terminated"}
            elif isinstance(sub, cst.Subscript) and reduce and kinds:
                base = sub.value
                if isinstance(base, cst.Name) and base.value in reduce.slot_containers:
                    index = sub.slice[0].slice if sub.slice else None
                    if isinstance(index, cst.Index) and isinstance(index.value, cst.Integer):
                        found.add(_slot_kind(kinds, int(index.value.value)))
            elif isinstance(sub, (cst.Attribute, cst.Call)) and attributes_named(sub, "terminated"):
                found.add("terminated")
        return found


def _sets_true(small: cst.CSTNode, vote: Optional[str]) -> bool:
    """`return True`, or `<vote> = True`."""
    if isinstance(small, cst.Return):
        return is_name(small.value, "True")
    return (vote is not None and isinstance(small, cst.Assign) and len(small.targets) == 1
            and is_name(small.targets[0].target, vote) and is_name(small.value, "True"))


def find_combine(body: Body, roles: Roles, reduce: Optional[ReduceSite], kinds: Optional[list[str]],
                 def_line: int) -> tuple[str, int]:
    """How the vote is combined with "already terminated"; `kinds` is the reduce payload, normalized."""
    classify = _Classifier(body, roles, reduce, kinds)
    vote = roles.vote
    combined = "vote OR any-terminated"
    for rec in body.recs:
        node = rec.node
        value = rec.value()
        if value is None:
            continue
        target = single_target(node)
        if isinstance(node, cst.AugAssign) and isinstance(node.operator, cst.BitOrAssign):
            if target == vote and "terminated" in classify(value):
                return combined, rec.line
            continue
        if isinstance(node, cst.If):
            # `if <any rank terminated>: return True` (or `vote = True`)
            body_sets_true = any(
                isinstance(s, cst.SimpleStatementLine) and any(_sets_true(small, vote) for small in s.body)
                for s in node.body.body)
            if body_sets_true and classify(node.test) == {"terminated"}:
                return combined, rec.line
            continue
        if not (isinstance(node, cst.Return) or (target is not None and target == vote)):
            continue
        parts = operands(value, cst.Or)
        if not parts:
            continue
        kinds = [classify(o) for o in parts]
        if any("vote" in k for k in kinds) and any("terminated" in k and "vote" not in k for k in kinds):
            return combined, rec.line
    final = body.returns[-1].line if body.returns else def_line
    return "vote only", final


def find_policies(body: Body) -> dict[str, int]:
    policies: dict[str, int] = {}
    for rec in body.recs:
        if not isinstance(rec.node, cst.If):
            continue
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


def find_timeout_cap(body: Body, index: ClassIndex, def_line: int) -> tuple[Optional[bool], int]:
    """Whether a `min(...)` bounds the timeout branch's budget (None: cannot tell)."""
    branch = [r for r in body.recs if covered(r.ctx) == {"timeout"}]
    if not branch:
        return None, def_line
    seen: set[int] = set()
    pending = [r.value() for r in branch if r.value() is not None]
    roots: list[cst.CSTNode] = []
    while pending:
        node = pending.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        roots.append(node)
        for name in names_read(node):
            for rec in body.bindings.get(name, []):
                pending.append(rec.value())
    return _min_cap(roots, index, -1, set()), branch[0].line


def _min_cap(roots: list[cst.CSTNode], index: ClassIndex, depth: int, seen: set[int]) -> Optional[bool]:
    """True when a `min(a, b, ...)` bounds the value, following self-helpers, attributes
    set on self and module functions a few levels deep; None when it depends on a helper
    this file does not define (inherited, injected, imported); False otherwise."""
    if depth > 4:
        return None
    follow: list[ast.AST] = []
    unknown = False
    for root in roots:
        for sub in walk(root):
            if isinstance(sub, cst.Call):
                func = sub.func
                if isinstance(func, cst.Name):
                    if func.value == "min" and sum(a.keyword is None for a in sub.args) >= 2:
                        return True
                    if func.value in index.module_functions:
                        follow.append(index.module_functions[func.value])
                    elif func.value not in _BUILTINS:
                        unknown = True
                elif (isinstance(func, cst.Attribute) and is_name(func.value, "self")
                      and func.attr.value not in index.methods):
                    unknown = True  # inherited or injected helper: cannot tell
            if isinstance(sub, cst.Attribute) and is_name(sub.value, "self"):
                attr = sub.attr.value
                if attr in index.methods:
                    follow.append(index.methods[attr])
                follow.extend(index.values_of(attr))
    fresh = [n for n in follow if id(n) not in seen]
    seen.update(id(n) for n in fresh)
    nodes = [as_cst(n, index.cst_nodes) for n in fresh]
    unknown = unknown or None in nodes
    deeper = _min_cap([n for n in nodes if n is not None], index, depth + 1, seen) if fresh else False
    if deeper:
        return True
    return None if unknown or deeper is None else False


def features(def_line: int, policies: dict[str, int], guard: Optional[Guard], combine: tuple[str, int],
             reduce: Optional[ReduceSite], kinds: Optional[list[str]],
             timeout_cap: tuple[Optional[bool], int]) -> dict[str, Feature]:
    first_policy = min(policies.values()) if policies else def_line
    feats = {
        "policies": Feature(", ".join(p for p in POLICIES if p in policies) or "none", first_policy),
    }
    if guard is None:
        feats["guard"] = Feature("missing", def_line)
        feats["guard-key"] = Feature(None, def_line)
        feats["guard-placement"] = Feature(None, def_line)
    else:
        feats["guard"] = Feature("present", guard.line)
        feats["guard-key"] = Feature(KEY_LABELS.get(guard.shape, f"local '{guard.target}'"), guard.line)
        if guard.problems:
            problem = guard.problems[0]
            feats["guard-placement"] = Feature(PLACEMENT_LABELS[problem.kind], problem.line)
        else:
            feats["guard-placement"] = Feature("effective", guard.line)
    feats["combine"] = Feature(*combine)
    if reduce is None:
        feats["reduce-op"] = Feature("no reduce", def_line)
        feats["reduce-payload"] = Feature(None, def_line)
    else:
        feats["reduce-op"] = Feature(reduce.op, reduce.line)
        shown = "unresolved" if kinds is None else "[" + ", ".join(
            "1-" + p[4:] if p.startswith("not ") else p for p in kinds) + "]"
        feats["reduce-payload"] = Feature(shown, reduce.payload_line)
    cap, line = timeout_cap
    feats["timeout-cap"] = Feature(None if cap is None else ("capped by a max" if cap else "uncapped"), line)
    return feats
