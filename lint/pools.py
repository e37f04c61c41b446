"""Whether a guard is owed at all: the class has extra-pool transfers, and the
code base tracks their completion apart from KV.

HC101-HC103 hold only when both are shown, each by a line the finding names:
- the class brings extra-pool transfers in: a name, attribute, keyword,
  parameter or string key holding one of `pool-fields` (`pool_transfers`,
  `extra_pools`, `supported_extra_pools` ...) in its body, in a module
  function it calls, or in a base class (same file, or a module resolved
  from the file's folders upward);
- the completion flag (`pool_transfers_done`) exists: in the files of the
  run, the configured implementations, or the project tree (the
  configuration's folder, else the repository root).
Before both existed upstream (the fork before 736263f3d; classes with no
extra pools) no guard could be written, and no rule fires.

stdlib only: this runs before, and without, any libcst work.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional

from lint.protocol import DONE


@dataclass(frozen=True)
class Evidence:
    path: str  # as displayed; "" for the linted file itself
    line: int
    what: str  # "passes 'extra_pools'"

    def describe(self) -> str:
        where = f"{self.path}:{self.line}" if self.path else f"line {self.line}"
        return f"{where} {self.what}"


def _mentions(node: ast.AST) -> Iterator[tuple[str, str, int]]:
    """(name, verb, line) for every identifier or string a node holds."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            yield sub.id, "stores" if isinstance(sub.ctx, ast.Store) else "reads", sub.lineno
        elif isinstance(sub, ast.Attribute):
            yield sub.attr, "stores" if isinstance(sub.ctx, ast.Store) else "reads", sub.lineno
        elif isinstance(sub, ast.keyword) and sub.arg:
            yield sub.arg, "passes", sub.value.lineno
        elif isinstance(sub, ast.arg):
            yield sub.arg, "takes", sub.lineno
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str) and len(sub.value) < 80:
            yield sub.value, "names", sub.lineno


def _pool_name(name: str, fields: tuple[str, ...], flag: str) -> bool:
    return flag not in name and any(f in name for f in fields)


def _in_body(nodes: Iterable[ast.AST], fields: tuple[str, ...], lines: list[str], flag: str
             ) -> Optional[tuple[int, str]]:
    best: Optional[tuple[int, str]] = None
    for node in nodes:
        start, end = getattr(node, "lineno", 1), getattr(node, "end_lineno", None) or len(lines)
        text = "".join(lines[start - 1:end])
        if not any(f in text for f in fields):
            continue  # walking a long class costs; its text says first whether a walk can find anything
        for name, verb, line in _mentions(node):
            if _pool_name(name, fields, flag) and (best is None or line < best[0]):
                best = (line, f"{verb} '{name}'")
    return best


def _module_file(base: Path, module: str, level: int) -> Optional[Path]:
    """The file of `module` imported from a file in `base`: relative imports from
    there, absolute ones from the first folder upward that holds the module."""
    parts = module.split(".") if module else []
    if level:
        folder = base
        for _ in range(level - 1):
            folder = folder.parent
        starts = [folder]
    else:
        starts = [base, *base.parents]
    for start in starts:
        stem = start.joinpath(*parts)
        for candidate in (stem.with_suffix(".py") if parts else None, stem / "__init__.py"):
            if candidate is not None and candidate.is_file():
                return candidate
    return None


@dataclass
class ClassPools:
    """Finds a class's extra-pool evidence, following module functions and base classes."""

    fields: tuple[str, ...]
    display: Callable[[Path], str]  # as the run shows paths
    flag: str = DONE  # the completion flag: a name holding it is no pool
    cache: dict[tuple[Path, str], Optional[Evidence]] = field(default_factory=dict)

    def find(self, tree: ast.Module, lines: list[str], path: Path, qualname: str, skip: str = "",
             depth: int = 0) -> Optional[Evidence]:
        """Evidence in `qualname`; `skip`: a method whose own lines are looked at last (the decision)."""
        key = (path, qualname)
        if key in self.cache:
            return self.cache[key]
        self.cache[key] = None  # a cycle of bases finds nothing more
        cls = _class(tree, qualname)
        found = None if cls is None else self._in_class(tree, lines, path, cls, skip, depth)
        self.cache[key] = found
        return found

    def _in_class(self, tree: ast.Module, lines: list[str], path: Path, cls: ast.ClassDef, skip: str,
                  depth: int) -> Optional[Evidence]:
        others = [n for n in cls.body if getattr(n, "name", None) != skip]
        own = (_in_body(others, self.fields, lines, self.flag)
               or _in_body([n for n in cls.body if n not in others], self.fields, lines, self.flag))
        here = "" if depth == 0 else self.display(path)
        if own is not None:
            return Evidence(here, own[0], own[1])
        functions = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        called = {c.func.id for c in ast.walk(cls) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)}
        helper = _in_body([functions[n] for n in sorted(called & set(functions))], self.fields, lines, self.flag)
        if helper is not None:
            return Evidence(here, helper[0], f"{helper[1]} (in a module function the class calls)")
        if depth >= 4:
            return None
        for base in cls.bases:
            found = self._in_base(tree, lines, path, base, depth)
            if found is not None:
                return found
        return None

    def _in_base(self, tree: ast.Module, lines: list[str], path: Path, base: ast.expr,
                 depth: int) -> Optional[Evidence]:
        if isinstance(base, ast.Name) and _class(tree, base.id) is not None:
            return self.find(tree, lines, path, base.id, depth=depth + 1)
        target = _imported(tree, base)
        file = _module_file(path.parent, target[0], target[1]) if target is not None else None
        if target is None or file is None:
            return None
        try:
            text = file.read_text(encoding="utf-8", errors="replace")
            other = ast.parse(text)
        except (OSError, SyntaxError, ValueError, RecursionError):
            return None
        return self.find(other, text.splitlines(keepends=True), file, target[2], depth=depth + 1)


def _class(tree: ast.Module, qualname: str) -> Optional[ast.ClassDef]:
    body: list[ast.stmt] = tree.body
    found: Optional[ast.ClassDef] = None
    for part in qualname.split("."):
        found = next((n for n in _class_defs(body) if n.name == part), None)
        if found is None:
            return None
        body = found.body
    return found


def _class_defs(body: list[ast.stmt]) -> Iterator[ast.ClassDef]:
    for node in body:
        if isinstance(node, ast.ClassDef):
            yield node
        elif isinstance(node, (ast.If, ast.Try)):  # `if TYPE_CHECKING:`, `try:` at module level
            blocks = [node.body, node.orelse]
            if isinstance(node, ast.Try):
                blocks += [h.body for h in node.handlers] + [node.finalbody]
            for block in blocks:
                yield from _class_defs(block)


def _imported(tree: ast.Module, base: ast.expr) -> Optional[tuple[str, int, str]]:
    """(module, level, class name) a base class is imported as."""
    if isinstance(base, ast.Name):
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if (alias.asname or alias.name) == base.id:
                        return node.module or "", node.level, alias.name
        return None
    if isinstance(base, ast.Attribute) and isinstance(base.value, (ast.Name, ast.Attribute)):
        prefix = ast.unparse(base.value)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if (alias.asname or alias.name) == prefix:
                        return alias.name, 0, base.attr
    return None


def flag_line(text: str, flag: str) -> Optional[tuple[int, bool]]:
    """(line, defines) of the flag's first definition, else its first read; comments skipped."""
    # a binding: `x.pool_transfers_done = ...`, `pool_transfers_done: bool`, `pool_transfers_done=...`
    defines = re.compile(r"\b" + re.escape(flag) + r"\b\s*(?::[^=\n]*)?=(?!=)")
    reads = re.compile(r"\b" + re.escape(flag) + r"\b")
    read: Optional[int] = None
    for number, line in enumerate(text.splitlines(), 1):
        code = line.split("#", 1)[0]
        if flag not in code:
            continue
        if defines.search(code):
            return number, True
        if read is None and reads.search(code):
            read = number
    return (read, False) if read is not None else None


def flag_evidence(display: str, text: str, flag: str) -> Optional[Evidence]:
    hit = flag_line(text, flag) if flag in text else None
    if hit is None:
        return None
    return Evidence(display, hit[0], f"{'defines' if hit[1] else 'reads'} '{flag}'")


@dataclass
class FlagSearch:
    """Where the completion flag is, searched once per run, nearest first: the
    run's own files (`seen`, gathered as they are read), then each group of
    files (the configured implementations, the project tree), listed only if
    nothing nearer binds the flag. A definition beats a read."""

    seen: list[Evidence]
    groups: list[Callable[[], Iterable[Path]]]
    display: Callable[[Path], str]
    flag: str = DONE
    searched: bool = False
    found: Optional[Evidence] = None

    def find(self) -> Optional[Evidence]:
        if not self.searched:
            self.found, self.searched = self._search(), True
        return self.found

    def _search(self) -> Optional[Evidence]:
        ordered = sorted(self.seen, key=lambda e: (not e.what.startswith("defines"), e.path, e.line))
        if ordered and ordered[0].what.startswith("defines"):
            return ordered[0]
        first_read = ordered[0] if ordered else None
        done = {e.path for e in ordered}
        for group in self.groups:
            for path in group():
                display = self.display(path)
                if display in done:
                    continue
                done.add(display)
                evidence = _flag_in(path, display, self.flag)
                if evidence is not None and evidence.what.startswith("defines"):
                    return evidence
                first_read = first_read or evidence
        return first_read  # the flag exists, but no file searched binds it


def _flag_in(path: Path, display: str, flag: str) -> Optional[Evidence]:
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if flag.encode() not in data:
        return None
    return flag_evidence(display, data.decode("utf-8", "replace"), flag)
