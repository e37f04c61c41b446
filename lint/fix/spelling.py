"""How an inserted guard spells its reads: only names seen on the same kind of object.

A guard reads the pool fields from the object the completion predicate reads
(`operation`, or a snapshot `progress = operation.progress()`). Those objects
have different fields (upstream's operation has `pool_transfers`, our snapshot
has `pool_transfers_present`), so a name is used only with evidence: a read of
that field on the same kind of object in, by priority, the same method, the
same file, the files linted with it, or the implementations the configuration
lists. Without evidence for the completion flag (`pool_transfers_done`, or the
configured `completion-flag`) the fix is declined.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Optional

from lint.locate import FunctionNode

if TYPE_CHECKING:
    from lint.analysis import MethodAnalysis

POOL_PREFIX = "pool_transfers"

# What an object is, independent of its local name: the operation parameter
# itself, a call on it (`operation.progress()`), or an attribute of it.
Kind = tuple[str, ...]


@dataclass(frozen=True)
class Read:
    """One read of a pool field: `obj.field` or `getattr(obj, "field", default)`."""

    field: str
    getattr_default: Optional[str]  # source text of the default; None for an attribute read
    quote: str = '"'

    def text(self, obj: str) -> str:
        if self.getattr_default is None:
            return f"{obj}.{self.field}"
        q = self.quote
        return f"getattr({obj}, {q}{self.field}{q}, {self.getattr_default})"


@dataclass(frozen=True)
class Spelling:
    done: Read
    transfers: Optional[Read]  # "has extra-pool transfers", when the evidence shows one
    source: str  # where the evidence came from, for the fix note

    def condition(self, predicate: str, obj: str) -> str:
        parts = [predicate]
        if self.transfers is not None:
            parts.append(self.transfers.text(obj))
        parts.append("not " + self.done.text(obj))
        return " and ".join(parts)


def _kind_of(value: ast.expr, param: str) -> Optional[Kind]:
    if isinstance(value, ast.Name) and value.id == param:
        return ("param",)
    if (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)
            and isinstance(value.func.value, ast.Name) and value.func.value.id == param):
        return ("call", value.func.attr)
    if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) and value.value.id == param:
        return ("attr", value.attr)
    return None


def _first_param(func: FunctionNode) -> Optional[str]:
    names = [a.arg for a in (*func.args.posonlyargs, *func.args.args)]
    if names and names[0] in ("self", "cls"):
        names = names[1:]
    return names[0] if names else None


def _pool_field(name: str, flag: str) -> bool:
    return name.startswith(POOL_PREFIX) or name == flag


def function_reads(func: FunctionNode, lines: list[str], flag: str) -> dict[Kind, list[Read]]:
    """Pool-field reads (the flag `flag` among them) in one function, by the kind of object they read."""
    param = _first_param(func)
    if param is None:
        return {}
    kinds: dict[str, Kind] = {param: ("param",)}
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            kind = _kind_of(node.value, param)
            if kind is not None:
                kinds.setdefault(node.targets[0].id, kind)
    found: dict[Kind, list[Read]] = {}
    for node in ast.walk(func):
        if (isinstance(node, ast.Attribute) and _pool_field(node.attr, flag)
                and isinstance(node.value, ast.Name) and node.value.id in kinds):
            found.setdefault(kinds[node.value.id], []).append(Read(node.attr, None))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
              and len(node.args) >= 2 and isinstance(node.args[0], ast.Name) and node.args[0].id in kinds
              and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
              and _pool_field(node.args[1].value, flag)):
            default = ast.unparse(node.args[2]) if len(node.args) >= 3 else None
            if default is None:
                continue  # a getattr without a default raises like an attribute read
            key = node.args[1]
            line = lines[key.lineno - 1] if 0 < key.lineno <= len(lines) else ""
            quote = line[key.col_offset] if key.col_offset < len(line) and line[key.col_offset] in "'\"" else '"'
            found.setdefault(kinds[node.args[0].id], []).append(Read(key.value, default, quote))
    return found


def _functions(body: list[ast.stmt]):
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node
            yield from _functions(node.body)
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node.body)
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            yield from _functions([c for c in ast.iter_child_nodes(node) if isinstance(c, ast.stmt)])


def merged(per_part: Iterable[dict[Kind, list[Read]]]) -> dict[Kind, list[Read]]:
    """Reads of several functions or files, kind by kind, in order."""
    out: dict[Kind, list[Read]] = {}
    for reads_by_kind in per_part:
        for kind, reads in reads_by_kind.items():
            out.setdefault(kind, []).extend(reads)
    return out


def tree_reads(tree: ast.Module, lines: list[str], flag: str) -> dict[Kind, list[Read]]:
    # only functions whose text mentions a pool field are walked
    return merged(function_reads(func, lines, flag) for func in _functions(tree.body)
                  if any(POOL_PREFIX in line or flag in line
                         for line in lines[func.lineno - 1: func.end_lineno or func.lineno]))


def spelling_from(reads: dict[Kind, list[Read]], kind: Kind, source: str, flag: str) -> Optional[Spelling]:
    found = reads.get(kind, [])
    done = next((r for r in found if r.field == flag), None)
    if done is None:
        return None
    transfers = next((r for r in found if r.field != flag), None)
    return Spelling(done, transfers, source)


def object_kind(method: "MethodAnalysis", obj: str) -> Optional[Kind]:
    """The kind of the local `obj` in the method being fixed, as its first binding gives it (a local
    bound to the operation itself is not taken for it)."""
    param = method.op_param
    if obj == param:
        return ("param",)
    func = method.site.index.methods.get(method.site.method)
    bindings = [node for node in ast.walk(func) if isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id == obj] if func else []
    if not bindings:
        return None
    kind = _kind_of(min(bindings, key=lambda node: (node.lineno, node.col_offset)).value, param)
    return None if kind == ("param",) else kind


def describe(kind: Kind, obj: str) -> str:
    if kind == ("param",):
        return f"'{obj}' (the operation)"
    if kind[0] == "call":
        return f"'{obj}' (the operation's {kind[1]}())"
    return f"'{obj}' (the operation's .{kind[1]})"


# Evidence sources by priority: (label, loader of {kind: reads}).
Source = tuple[str, Callable[[], dict[Kind, list[Read]]]]


class Evidence:
    """Pool-field reads seen across the run, looked up lazily by priority."""

    def __init__(self, sources: Iterable[Source], flag: str) -> None:
        self._sources, self.flag = list(sources), flag
        self._cache: dict[int, dict[Kind, list[Read]]] = {}

    def spelling(self, kind: Kind, method: "MethodAnalysis") -> Optional[Spelling]:
        own = method.site.index.methods.get(method.site.method)
        if own is not None:
            found = spelling_from(function_reads(own, method.lines, self.flag), kind, "this method", self.flag)
            if found is not None:
                return found
        for i, (label, load) in enumerate(self._sources):
            if i not in self._cache:
                self._cache[i] = load()
            found = spelling_from(self._cache[i], kind, label, self.flag)
            if found is not None:
                return found
        return None


def file_reads(path: Path, flag: str) -> dict[Kind, list[Read]]:
    """Reads in a file on disk (a configured implementation); {} when unreadable."""
    try:
        text = path.read_text(encoding="utf-8")
        if POOL_PREFIX not in text and flag not in text:
            return {}
        tree = ast.parse(text)
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return {}
    return tree_reads(tree, text.splitlines(), flag)
