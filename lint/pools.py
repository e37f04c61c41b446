"""Whether a guard is owed at all: the class has extra-pool transfers, and the
code base tracks their completion apart from KV.

HC101-HC103 hold only when both are shown, each by a line the finding names
(`Linter.owed`, lint/api.py):
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

Names that look like the completion flag but are not it (`pool_transfers_finished`,
`transfers_done`, `pool_transfer_done`) are searched for the same way: a check
that reads one is no guard, and HC101 says which it reads and whether anything
searched defines that name; a configured flag bound nowhere while a name like it
is bound was renamed.

stdlib only: this runs before, and without, any libcst work (and the name searches in
`finish`, after the syntax trees are released).
"""

from __future__ import annotations

import ast
import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional

from lint.locate import find_class, module_functions
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
        cls = find_class(tree, qualname)
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
        functions = module_functions(tree)
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
        if isinstance(base, ast.Name) and find_class(tree, base.id) is not None:
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


def flag_evidence(display: str, text: str, flag: str) -> Optional[Evidence]:
    """The flag's first definition in `text`, else its first read; comments skipped."""
    if flag not in text:
        return None
    # a binding: `x.pool_transfers_done = ...`, `pool_transfers_done: bool`, `pool_transfers_done=...`
    defines = re.compile(r"\b" + re.escape(flag) + r"\b\s*(?::[^=\n]*)?=(?!=)")
    reads = re.compile(r"\b" + re.escape(flag) + r"\b")
    read: Optional[int] = None
    for number, line in enumerate(text.splitlines(), 1):
        code = line.split("#", 1)[0]
        if flag not in code:
            continue
        if defines.search(code):
            return Evidence(display, number, f"defines '{flag}'")
        if read is None and reads.search(code):
            read = number
    return Evidence(display, read, f"reads '{flag}'") if read is not None else None


def _text_naming(path: Path, name: str) -> Optional[str]:
    """The file's text when it holds `name` (None: it does not, or cannot be read)."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    return data.decode("utf-8", "replace") if name.encode() in data else None


_TRANSFERS = ("transfer", "xfer", "pool", "extra")
_ENDED = ("done", "finish", "complet", "ended", "ready", "pending")
_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")


def looks_like_flag(name: str, flag: str) -> bool:
    """A transfer word with a completion word, or a near miss of the flag's spelling."""
    if flag in name:
        return False  # the flag itself, as the guard pass reads it
    words = [w.lower() for w in _WORD.findall(name)]
    if any(w.startswith(_TRANSFERS) for w in words) and any(w.startswith(_ENDED) for w in words):
        return True
    return difflib.SequenceMatcher(None, name.lower(), flag.lower()).ratio() >= 0.9


# an attribute bound (`x.name = ...`) or a class field declared boolean (`name: bool`)
_BOUND = re.compile(r"\.([A-Za-z_]\w*)\s*=(?!=)|^\s+([A-Za-z_]\w*)\s*:\s*bool\b")


def _bound_like(lines: Iterable[str], flag: str) -> Optional[tuple[int, str]]:
    """(line, name) of the first attribute bound under a name like `flag` (comments skipped)."""
    for number, line in enumerate(lines, 1):
        for match in _BOUND.finditer(line.split("#", 1)[0]):
            name = match.group(1) or match.group(2)
            if looks_like_flag(name, flag):
                return number, name
    return None


def _definition(name: str) -> re.Pattern:
    n = re.escape(name)
    # `x.name = ...`, `name: bool = ...`, `name=...`, a field `name: bool`, `def name(`, setattr(x, "name", ...)
    return re.compile(rf"\b{n}\b\s*(?::[^=\n]*)?=(?!=)|^\s*{n}\s*:|\bdef\s+{n}\s*\(|setattr\([^,]+,\s*['\"]{n}['\"]")


def defined_at(lines: Iterable[str], name: str) -> Optional[int]:
    """The first line that binds `name` (comments skipped)."""
    pattern = _definition(name)
    for number, line in enumerate(lines, 1):
        if name in line and pattern.search(line.split("#", 1)[0]):
            return number
    return None


@dataclass
class FileSearch:
    """The run's searches beyond a method's own file, nearest first: the run's files, the configured
    implementations, then the project tree. Each group is listed once, when a search first needs it, and
    each answer is kept for the run.

    The completion flag is searched once: in the run's own files as they are read (`note_flag`), then, only
    if none of them binds it, in the other groups; a definition beats a read."""

    groups: list[Callable[[], Iterable[Path]]]  # the run's files, the configured implementations, the project tree
    display: Callable[[Path], str]
    flag: str = DONE
    seen: list[Evidence] = field(default_factory=list)  # where the run's own files hold the flag
    listed: dict[int, list[Path]] = field(default_factory=dict)
    files: Optional[list[Path]] = None  # every file of the groups, once each (resolved)
    answers: dict[tuple[str, str], Optional[Evidence]] = field(default_factory=dict)

    def _paths(self, first: int = 0) -> Iterator[Path]:
        for i in range(first, len(self.groups)):
            if i not in self.listed:
                self.listed[i] = list(self.groups[i]())
            yield from self.listed[i]

    def _once(self, key: tuple[str, str], search: Callable[[], Optional[Evidence]]) -> Optional[Evidence]:
        if key not in self.answers:
            self.answers[key] = search()
        return self.answers[key]

    def note_flag(self, display: str, text: str) -> None:
        found = flag_evidence(display, text, self.flag)
        if found is not None:
            self.seen.append(found)

    def flag_at(self) -> Optional[Evidence]:
        """Where the completion flag is defined, else read (None: nowhere searched)."""
        return self._once(("flag", self.flag), self._flag_search)

    def _flag_search(self) -> Optional[Evidence]:
        ordered = sorted(self.seen, key=lambda e: (not e.what.startswith("defines"), e.path, e.line))
        if ordered and ordered[0].what.startswith("defines"):
            return ordered[0]
        first_read = ordered[0] if ordered else None
        done = {e.path for e in ordered}
        for path in self._paths(1):  # the run's own files are in `seen`
            display = self.display(path)
            if display in done:
                continue
            done.add(display)
            text = _text_naming(path, self.flag)
            evidence = None if text is None else flag_evidence(display, text, self.flag)
            if evidence is not None and evidence.what.startswith("defines"):
                return evidence
            first_read = first_read or evidence
        return first_read  # the flag exists, but no file searched binds it

    def _files(self) -> list[Path]:
        if self.files is None:
            self.files = list({path.resolve(): None for path in self._paths()})
        return self.files

    def defined(self, name: str, own_path: str, own_lines: list[str]) -> Optional[Evidence]:
        """Where `name` is defined: the method's own file, then the groups."""
        line = defined_at(own_lines, name)
        if line is not None:
            return Evidence("", line, f"defines '{name}'")
        return self._once(("defines", name), lambda: self._defined_in_files(name, own_path))

    def _defined_in_files(self, name: str, own_path: str) -> Optional[Evidence]:
        for path in self._files():
            display = self.display(path)
            if display == own_path:
                continue
            text = _text_naming(path, name)
            line = defined_at(text.splitlines(), name) if text is not None else None
            if line is not None:
                return Evidence(display, line, f"defines '{name}'")
        return None

    def renamed(self, own_lines: list[str]) -> Optional[Evidence]:
        """Where a flag-like attribute is bound, when the flag itself is bound nowhere: the flag renamed."""
        line = _bound_like(own_lines, self.flag)
        if line is not None:
            return Evidence("", line[0], f"defines '{line[1]}'")
        return self._once(("renamed", self.flag), self._renamed_in_files)  # the same for every method of the run

    def _renamed_in_files(self) -> Optional[Evidence]:
        for path in self._files():
            try:
                lines = path.read_text("utf-8", "replace").splitlines()
            except OSError:
                continue
            line = _bound_like(lines, self.flag)
            if line is not None:
                return Evidence(self.display(path), line[0], f"defines '{line[1]}'")
        return None
