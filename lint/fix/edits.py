"""Edits to a method's syntax tree, and splicing the result back into the file.

Edits are libcst node replacements keyed by the statements they sit next to,
so everything else keeps its formatting and comments.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from lint.unit import ParsedMethod, reindent


@dataclass
class Edits:
    inserts: dict[int, list[cst.BaseStatement]] = field(default_factory=dict)  # after this statement
    removes: set[int] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)

    def empty(self) -> bool:
        return not self.inserts and not self.removes

    def merge(self, other: "Edits") -> None:
        for key, stmts in other.inserts.items():
            self.inserts.setdefault(key, []).extend(stmts)
        self.removes |= other.removes
        self.notes.extend(other.notes)


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
