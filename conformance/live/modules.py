"""Where a tree keeps each upstream module the harness uses: the dotted name it is known by, or, where upstream moved it,
the module of the tree that defines the name the harness uses it for.

Modules move across upstream's history (the sliding-window allocator lived in
mem_cache/allocator.py, then mem_cache/swa_memory_pool.py, then
mem_cache/allocator/swa.py), and a fixed dotted path would refuse every tree
but one. A `Module` entry names the class or function the harness reads from
it; where the dotted name has no file in the tree, the tree is searched for
the top-level definition of that name, and the module holding it is used,
with the line as evidence. Nothing is searched where the dotted name exists.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from conformance.live.layout import Module

SEARCHED = "srt"  # under sglang/: where upstream keeps the cache's modules


@dataclass(frozen=True)
class Located:
    dotted: str  # the module to import
    evidence: str | None = None  # where it moved: the line defining the name (None: found under its own name)


def module_file(package: Path, dotted: str) -> Path | None:
    """The file of `dotted` (sglang.x.y) in the tree whose sglang package is `package`, or None."""
    base = package.parent.joinpath(*dotted.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@lru_cache(maxsize=64)
def definitions(package: Path, name: str) -> tuple[tuple[str, int], ...]:
    """Every top-level `class name` or `def name` under sglang/srt: (dotted module, line), in path order."""
    pattern = re.compile(rf"^(?:class|def) {re.escape(name)}\b", re.M)
    out = []
    for path in sorted((package / SEARCHED).rglob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        found = pattern.search(text)
        if found is not None:
            parts = path.relative_to(package.parent).with_suffix("").parts
            dotted = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out.append((dotted, text.count("\n", 0, found.start()) + 1))
    return tuple(out)


def _shared_prefix(a: str, b: str) -> int:
    count = 0
    for x, y in zip(a.split("."), b.split(".")):
        if x != y:
            break
        count += 1
    return count


def locate_module(package: Path, entry: "str | Module") -> Located:
    """Where the tree keeps `entry`: its own dotted name where that exists, else the module defining entry.defines (the
    one nearest the dotted name in the package tree). Where neither is found, the dotted name: its import names it."""
    if isinstance(entry, str):
        return Located(entry)
    if module_file(package, entry.dotted) is not None:
        return Located(entry.dotted)
    hits = definitions(package.resolve(), entry.defines)
    if not hits:
        return Located(entry.dotted)
    dotted, line = max(hits, key=lambda hit: _shared_prefix(hit[0], entry.dotted))
    where = module_file(package, dotted)
    shown = f"sglang/{where.relative_to(package)}" if where is not None else dotted
    return Located(dotted, f"{entry.dotted} is not in this tree; {shown}:{line} defines {entry.defines}, so it is imported from {dotted}")
