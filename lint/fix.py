"""Autofix: insert a missing guard, or move a mis-keyed / misplaced one.

Both put the guard right after the completion predicate is (last) bound,
keyed on that predicate. Edits are libcst node replacements, so everything
else in the file keeps its formatting and comments; re-running finds nothing
left to fix.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Optional

import libcst as cst

from lint.cstutil import dotted_name, is_false_constant, policy_test, walk
from lint.analysis import Guard, MethodAnalysis, StmtRec
from lint.unit import ParsedMethod, reindent

GUARD_COMMENT = "# KV alone is not complete while extra-pool transfers still run."

_GETATTR_POOL = re.compile(r"getattr\(\s*[\w.]+\s*,\s*(['\"])pool_transfers")
_ATTR_POOL = re.compile(r"\.pool_transfers(?:_done)?\b")
_GETATTR_ANY = re.compile(r"getattr\(\s*[\w.]+\s*,\s*(['\"])")
_POOL_FIELD = re.compile(r"(?:\.|getattr\(\s*[\w.]+\s*,\s*['\"])(pool_transfers\w*)")


def _predicate(method: MethodAnalysis) -> Optional[str]:
    """The predicate to key on: the one bound last (closest to the vote)."""
    best: Optional[tuple[int, str]] = None
    for name in method.predicates:
        lines = [r.line for r in _plain_bindings(method, name)]
        if lines and (best is None or max(lines) > best[0]):
            best = (max(lines), name)
    return best[1] if best else None


def _plain_bindings(method: MethodAnalysis, name: str) -> list[StmtRec]:
    return [
        r for r in method.body.bindings.get(name, [])
        if not any(r is g.rec or r.inside(g.rec.node) for g in method.guards)
    ]


def _anchor(method: MethodAnalysis, predicate: str) -> Optional[StmtRec]:
    """The statement after which the guard goes: the predicate's last binding,
    lifted out of non-policy compound statements (an if/else that binds it)."""
    binds = _plain_bindings(method, predicate)
    if not binds:
        return None
    current = max(binds, key=lambda r: r.line)
    rec_of = {id(r.node): r for r in method.body.recs}
    while current.ctx:
        ancestor, _ = current.ctx[-1]
        if isinstance(ancestor, cst.If) and policy_test(ancestor.test) is not None:
            break
        parent = rec_of.get(id(ancestor))
        if parent is None:
            return None
        current = parent
    return current if isinstance(current.block, cst.IndentedBlock) else None


def can_insert_guard(method: MethodAnalysis) -> bool:
    if method.guard is not None or method.op_param is None:
        return False
    predicate = _predicate(method)
    return predicate is not None and _anchor(method, predicate) is not None


def can_relocate_guard(method: MethodAnalysis) -> bool:
    guard = method.guard
    if guard is None or not guard.relocatable:
        return False
    predicate = _predicate(method)
    return predicate is not None and _anchor(method, predicate) is not None


@dataclass
class Edits:
    inserts: dict[int, list[cst.BaseStatement]] = field(default_factory=dict)
    removes: set[int] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)

    def empty(self) -> bool:
        return not self.inserts and not self.removes


class _Rename(cst.CSTTransformer):
    def __init__(self, old: set[str], new: str) -> None:
        self.old, self.new = old, new

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.Name:
        return updated_node.with_changes(value=self.new) if updated_node.value in self.old else updated_node

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.Attribute:
        return updated_node.with_changes(attr=original_node.attr)

    def leave_Arg(self, original_node: cst.Arg, updated_node: cst.Arg) -> cst.Arg:
        return updated_node.with_changes(keyword=original_node.keyword)


class _ForceToPredicate(cst.CSTTransformer):
    """In a guard body: `return False` / `x = False` become `predicate = False`."""

    def __init__(self, predicate: str) -> None:
        self.predicate = predicate

    def leave_Return(self, original_node: cst.Return, updated_node: cst.Return):
        if is_false_constant(updated_node.value):
            return cst.Assign(targets=[cst.AssignTarget(cst.Name(self.predicate))],
                              value=cst.Name("False"))
        return updated_node

    def leave_Assign(self, original_node: cst.Assign, updated_node: cst.Assign) -> cst.Assign:
        if is_false_constant(updated_node.value) and len(updated_node.targets) == 1:
            return updated_node.with_changes(targets=[cst.AssignTarget(cst.Name(self.predicate))])
        return updated_node


def _spelling(text: str) -> tuple[bool, str]:
    """(use getattr, quote character) as the file already spells it."""
    match = _GETATTR_POOL.search(text)
    if match:
        return True, match.group(1)
    if _ATTR_POOL.search(text):
        return False, '"'
    match = _GETATTR_ANY.search(text)
    if match:
        return True, match.group(1)
    return False, '"'


def _transfers_field(text: str) -> str:
    """The name the file uses for "has extra-pool transfers" (default `pool_transfers`)."""
    names = [n for n in _POOL_FIELD.findall(text) if not n.endswith("_done")]
    return Counter(names).most_common(1)[0][0] if names else "pool_transfers"


def _progress_object(method: MethodAnalysis, predicate: str) -> Optional[str]:
    """What the predicate reads `completed_tokens` from (`operation`, a snapshot, ...)."""
    for rec in _plain_bindings(method, predicate):
        for sub in walk(rec.value()) if rec.value() is not None else ():
            if isinstance(sub, cst.Attribute) and sub.attr.value == "completed_tokens":
                name = dotted_name(sub.value)
                if name:
                    return name
    return method.op_param


def _new_guard(method: MethodAnalysis, predicate: str, file_text: str) -> cst.BaseStatement:
    parsed = method.parsed
    op = _progress_object(method, predicate)
    field = _transfers_field(file_text)
    use_getattr, q = _spelling(file_text)
    if use_getattr:
        test = (f"{predicate} and getattr({op}, {q}{field}{q}, None) "
                f"and not getattr({op}, {q}pool_transfers_done{q}, True)")
    else:
        test = f"{predicate} and {op}.{field} and not {op}.pool_transfers_done"
    module = parsed.module
    code = f"if {test}:\n{module.default_indent}{predicate} = False\n"
    stmt = cst.parse_statement(code, config=module.config_for_parsing)
    return stmt.with_changes(leading_lines=(cst.EmptyLine(comment=cst.Comment(GUARD_COMMENT)),))


def _relocated(method: MethodAnalysis, guard: Guard, predicate: str) -> cst.BaseStatement:
    wrong = {name for name in (guard.key, method.vote) if name and name != predicate}
    stmt = guard.rec.owner
    renamed = stmt.visit(_Rename(wrong, predicate)) if wrong else stmt
    if isinstance(renamed, cst.If):
        renamed = renamed.with_changes(body=renamed.body.visit(_ForceToPredicate(predicate)))
    assert isinstance(renamed, cst.BaseStatement)
    return renamed


def plan(method: MethodAnalysis, codes: set[str], file_text: str, edits: Edits) -> None:
    """Add this method's fixes for the given finding codes to `edits`."""
    predicate = _predicate(method)
    if predicate is None:
        return
    anchor = _anchor(method, predicate)
    if anchor is None:
        return
    if "HC101" in codes and can_insert_guard(method) and method.op_param:
        edits.inserts.setdefault(id(anchor.owner), []).append(
            _new_guard(method, predicate, file_text))
        edits.notes.append(f"{method.qualname}: inserted guard on '{predicate}'")
    elif codes & {"HC102", "HC103"} and can_relocate_guard(method):
        guard = method.guard
        assert guard is not None
        if guard.rec.owner is anchor.owner:
            return
        edits.removes.add(id(guard.rec.owner))
        edits.inserts.setdefault(id(anchor.owner), []).append(_relocated(method, guard, predicate))
        edits.notes.append(f"{method.qualname}: moved guard onto '{predicate}' after line {anchor.line}")


class _Apply(cst.CSTTransformer):
    def __init__(self, edits: Edits) -> None:
        self.edits = edits

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock,
                            updated_node: cst.IndentedBlock) -> cst.IndentedBlock:
        ids = [id(s) for s in original_node.body]
        if not any(i in self.edits.inserts or i in self.edits.removes for i in ids):
            return updated_node
        body: list[cst.BaseStatement] = []
        for sid, stmt in zip(ids, updated_node.body):
            if sid not in self.edits.removes:
                body.append(stmt)
            body.extend(self.edits.inserts.get(sid, []))
        if not body:
            body = [cst.SimpleStatementLine(body=[cst.Pass()])]
        return updated_node.with_changes(body=body)


def apply(module: cst.Module, edits: Edits) -> cst.Module:
    return module.visit(_Apply(edits))


def splice(lines: list[str], parsed: ParsedMethod, new_module: cst.Module) -> list[str]:
    """Replace the method's lines with the fixed snippet, re-indented."""
    assert parsed.prefix is not None
    site = parsed.site
    new_lines = reindent(new_module.code, parsed.prefix)
    original_last = lines[site.end_line - 1]
    if new_lines and not original_last.endswith(("\n", "\r")):
        new_lines[-1] = new_lines[-1].rstrip("\r\n")
    return lines[: site.first_line - 1] + new_lines + lines[site.end_line:]
