"""Find termination methods with the stdlib parser (fast), before any libcst work.

libcst then parses only the method found here (see lint/unit.py); the class-level
facts the analysis needs from the rest of the file (helper methods, attributes
set on self, module functions) are indexed here from the same stdlib tree.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Iterator, Optional, Union

FunctionNode = Union[ast.FunctionDef, ast.AsyncFunctionDef]


@dataclass
class ClassIndex:
    methods: dict[str, FunctionNode] = field(default_factory=dict)
    module_functions: dict[str, FunctionNode] = field(default_factory=dict)
    node: Optional[ast.ClassDef] = None
    _values: Optional[dict[str, list[ast.expr]]] = None
    cst_nodes: dict = field(default_factory=dict)  # lint.cstutil.as_cst's cache

    def values_of(self, attr: str) -> list[ast.expr]:
        """What the class assigns to `self.<attr>` in its methods, or to the class attribute `<attr>`
        (gathered when first asked, from statements only: most classes are never asked)."""
        if self._values is None:
            self._values = _assigned_values(self.node) if self.node is not None else {}
        return self._values.get(attr, [])


@dataclass
class MethodSite:
    class_qualname: str
    method: str
    def_line: int
    first_line: int
    end_line: int
    col_offset: int
    index: ClassIndex

    @property
    def qualname(self) -> str:
        return f"{self.class_qualname}.{self.method}"


def module_functions(tree: ast.Module) -> dict[str, FunctionNode]:
    return {node.name: node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}


def iter_classes(body: list[ast.stmt], prefix: str = "") -> Iterator[tuple[str, ast.ClassDef]]:
    """(qualified name, node) of every class, nested ones included."""
    for node in body:
        if isinstance(node, ast.ClassDef):
            qual = f"{prefix}{node.name}"
            yield qual, node
            yield from iter_classes(node.body, qual + ".")
        elif isinstance(node, (ast.If, ast.Try)):
            # Classes defined under `if TYPE_CHECKING:` / `try:` at module level.
            blocks = [node.body, node.orelse]
            if isinstance(node, ast.Try):
                blocks += [h.body for h in node.handlers] + [node.finalbody]
            for block in blocks:
                yield from iter_classes(block, prefix)


def _class_index(cls: ast.ClassDef, functions: dict[str, FunctionNode]) -> ClassIndex:
    methods = {n.name: n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return ClassIndex(methods, functions, cls)


def _statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Every statement in a block, nested blocks included (expressions are not walked: they are most nodes)."""
    for stmt in body:
        yield stmt
        for name in ("body", "orelse", "finalbody"):
            inner = getattr(stmt, name, None)
            if isinstance(inner, list) and not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield from _statements(inner)
        for handler in getattr(stmt, "handlers", ()):
            yield from _statements(handler.body)
        for case in getattr(stmt, "cases", ()):
            yield from _statements(case.body)


def _assigned_values(cls: ast.ClassDef) -> dict[str, list[ast.expr]]:
    values: dict[str, list[ast.expr]] = {}
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for stmt in _statements(node.body):
                if isinstance(stmt, ast.Assign):
                    targets, value = stmt.targets, stmt.value
                elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)) and stmt.value is not None:
                    targets, value = [stmt.target], stmt.value
                else:
                    continue
                for target in targets:
                    if (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                            and target.value.id == "self"):
                        values.setdefault(target.attr, []).append(value)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    values.setdefault(target.id, []).append(node.value)
    return values


def _site(qual: str, func: FunctionNode, index: ClassIndex) -> MethodSite:
    first = min([func.lineno] + [d.lineno for d in func.decorator_list])
    return MethodSite(
        class_qualname=qual,
        method=func.name,
        def_line=func.lineno,
        first_line=first,
        end_line=func.end_lineno or func.lineno,
        col_offset=func.col_offset,
        index=index,
    )


def find_methods(tree: ast.Module, names: frozenset[str]) -> list[MethodSite]:
    """Every method named in `names`, defined directly in any class body."""
    functions = module_functions(tree)
    sites: list[MethodSite] = []
    for qual, cls in iter_classes(tree.body):
        funcs = [n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name in names]
        if funcs:
            index = _class_index(cls, functions)
            sites.extend(_site(qual, f, index) for f in funcs)
    return sites


def find_method(tree: ast.Module, class_qualname: str, method: str) -> Union[MethodSite, str]:
    """The one configured method, or a reason string naming what is missing."""
    cls = find_class(tree, class_qualname)
    if cls is None:
        return f"class {class_qualname} not found"
    func = next((n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == method),
                None)
    if func is None:
        return f"class {class_qualname} has no method {method}"
    return _site(class_qualname, func, _class_index(cls, module_functions(tree)))


def find_class(tree: ast.Module, qualname: str) -> Optional[ast.ClassDef]:
    return next((cls for qual, cls in iter_classes(tree.body) if qual == qualname), None)


def class_sites(site: MethodSite) -> dict[str, MethodSite]:
    """Every method defined in the site's class, located as the site is."""
    return {name: _site(site.class_qualname, func, site.index) for name, func in site.index.methods.items()}
