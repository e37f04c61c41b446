"""Mutants of an implementation's protocol functions: every operator at every place it applies, each one change.

A mutant's id is `<path>:<line>:<operator>` (path relative to the module's
root on sys.path, so the id does not depend on where the checkout lies;
`#2`, `#3`... tell apart several changes of one operator on one line, in
column order). The same source gives the same ids, in the same order.
Changes that give the same mutated file as an earlier one are dropped, and
so are changes that leave the file as it was.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from conformance.mutants.expectations import expected_clauses
from conformance.mutants.operators import OPERATORS, Operator, Site
from conformance.mutants.roles import DECLARED, Target


@dataclass(frozen=True)
class Mutant:
    id: str
    path: str  # shown, relative to the module root: caches/core/commit.py
    file: str  # the file on disk the mutant replaces at import time
    module: str
    line: int
    operator: str
    function: str
    role: str
    description: str
    expected: tuple[str, ...]
    diff: str
    source: str  # the whole mutated module
    equivalent: str | None = None  # the catalogue's argument, for a pattern known to be equivalent


def display_path(module: str, file: str) -> str:
    parts = module.split(".")
    if Path(file).name == "__init__.py":
        parts.append("__init__")
    return "/".join(parts) + ".py"


class _Functions(cst.CSTVisitor):
    """FunctionDef nodes by qualified name ('Class.method', 'function'); nested functions belong to their parent.

    `owners[name]`: the classes from the module down to the function, when each is a direct child of the one
    above (the usual layout); a mutant's module is then rebuilt along that path alone, not by a whole-tree pass.
    """

    def __init__(self) -> None:
        self.scope: list[cst.ClassDef] = []
        self.found: dict[str, cst.FunctionDef] = {}
        self.owners: dict[str, tuple[cst.ClassDef, ...]] = {}

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        self.scope.append(node)
        return True

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self.scope.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        name = ".".join([*(c.name.value for c in self.scope), node.name.value])
        if name not in self.found:  # a property's setter after its getter: the getter names it
            self.found[name] = node
            self.owners[name] = tuple(self.scope)
        return False


class _Replace(cst.CSTTransformer):
    def __init__(self, target: cst.CSTNode, replacement: cst.CSTNode) -> None:
        self.target, self.replacement = target, replacement

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode):  # type: ignore[override]
        return self.replacement if original_node is self.target else updated_node


def _swapped(body: Sequence[cst.CSTNode], old: cst.CSTNode, new: cst.CSTNode) -> list[cst.CSTNode] | None:
    found = [i for i, node in enumerate(body) if node is old]
    return [*body[: found[0]], new, *body[found[0] + 1 :]] if found else None


def mutated_module(module: cst.Module, owners: Sequence[cst.ClassDef], function: cst.FunctionDef, site: Site) -> str:
    """The module's code with the site's change: the function is transformed, then its classes and the module rebuilt around it."""
    new: cst.CSTNode = function.visit(_Replace(site.target, site.replacement))
    old: cst.CSTNode = function
    for owner in reversed(owners):
        body = _swapped(owner.body.body, old, new) if isinstance(owner.body, cst.IndentedBlock) else None
        if body is None:
            return module.visit(_Replace(site.target, site.replacement)).code  # an unusual layout: the whole-tree pass
        old, new = owner, owner.with_changes(body=owner.body.with_changes(body=body))
    body = _swapped(module.body, old, new)
    if body is None:
        return module.visit(_Replace(site.target, site.replacement)).code
    return module.with_changes(body=body).code


def functions_of(source: str) -> dict[str, cst.FunctionDef]:
    visitor = _Functions()
    cst.parse_module(source).visit(visitor)
    return visitor.found


def mutants_of(targets: Sequence[Target], operators: Sequence[Operator] = OPERATORS) -> list[Mutant]:
    """Every mutant of these target functions, ordered by path, line, column and operator."""
    by_file: dict[str, list[Target]] = {}
    for target in targets:
        by_file.setdefault(target.file, []).append(target)
    out: list[Mutant] = []
    for file in sorted(by_file, key=lambda f: display_path(by_file[f][0].module, f)):
        out.extend(_file_mutants(by_file[file], operators))
    return out


def _file_mutants(targets: Sequence[Target], operators: Sequence[Operator]) -> Iterable[Mutant]:
    first = targets[0]
    original = Path(first.file).read_text(encoding="utf-8")
    wrapper = MetadataWrapper(cst.parse_module(original))
    module = wrapper.module
    positions = wrapper.resolve(PositionProvider)
    visitor = _Functions()
    module.visit(visitor)
    path = display_path(first.module, first.file)
    found: list[tuple[tuple[int, int, str], Site, Target]] = []
    for target in targets:
        function = visitor.found.get(target.qualname)
        if function is None:
            continue
        for operator in operators:
            if operator.roles is not None and target.role.name not in operator.roles and target.role is not DECLARED:
                continue
            for site in operator.find(function, module.code_for_node):
                start = positions[site.anchor].start
                found.append(((start.line, start.column, site.operator), site, target))
    found.sort(key=lambda entry: entry[0])
    seen_sources = {original}
    per_line: dict[tuple[int, str], int] = {}
    for (line, _, operator), site, target in found:
        mutated = mutated_module(module, visitor.owners[target.qualname], visitor.found[target.qualname], site)
        if mutated in seen_sources:
            continue
        seen_sources.add(mutated)
        count = per_line[(line, operator)] = per_line.get((line, operator), 0) + 1
        suffix = f"#{count}" if count > 1 else ""
        yield Mutant(
            id=f"{path}:{line}:{operator}{suffix}", path=path, file=target.file, module=target.module, line=line,
            operator=operator, function=target.qualname, role=target.role.name, description=site.description,
            expected=expected_clauses(operator, target.role, site.hint),
            diff=unified_diff(original, mutated, path), source=mutated, equivalent=site.equivalent,
        )


def unified_diff(original: str, mutated: str, path: str) -> str:
    lines = difflib.unified_diff(original.splitlines(keepends=True), mutated.splitlines(keepends=True),
                                 fromfile=f"a/{path}", tofile=f"b/{path}", n=1)
    return "".join(lines)
