"""Names that look like the completion flag but are not it (`pool_transfers_finished`,
`transfers_done`, `pool_transfer_done`): a check that reads one is no guard, and
HC101 says which it reads and whether anything searched defines that name.

stdlib only: the search runs in `finish`, after the syntax trees are released.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Optional

from lint.pools import Evidence

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
class DefinitionSearch:
    """Where a name is defined: the method's own file, then each group of files
    (the run's files, the configured implementations, the project tree)."""

    groups: list[Callable[[], Iterable[Path]]]
    display: Callable[[Path], str]
    files: Optional[list[Path]] = None
    found: dict[str, Optional[Evidence]] = field(default_factory=dict)
    renames: dict[str, Optional[Evidence]] = field(default_factory=dict)  # flag -> a flag-like binding in the files

    def find(self, name: str, own_path: str, own_lines: list[str]) -> Optional[Evidence]:
        line = defined_at(own_lines, name)
        if line is not None:
            return Evidence("", line, f"defines '{name}'")
        if name not in self.found:
            self.found[name] = self._search(name, own_path)
        return self.found[name]

    def renamed(self, flag: str, own_path: str, own_lines: list[str]) -> Optional[Evidence]:
        """Where a flag-like attribute is bound, when `flag` itself is bound nowhere: the flag renamed."""
        line = _bound_like(own_lines, flag)
        if line is not None:
            return Evidence("", line[0], f"defines '{line[1]}'")
        if flag not in self.renames:  # the same for every method of the run: the files are read once
            self.renames[flag] = self._renamed_in_files(flag)
        return self.renames[flag]

    def _renamed_in_files(self, flag: str) -> Optional[Evidence]:
        for path in self._files():
            try:
                lines = path.read_text("utf-8", "replace").splitlines()
            except OSError:
                continue
            line = _bound_like(lines, flag)
            if line is not None:
                return Evidence(self.display(path), line[0], f"defines '{line[1]}'")
        return None

    def _files(self) -> list[Path]:
        if self.files is None:
            listed = {path.resolve(): None for group in self.groups for path in group()}
            self.files = list(listed)
        return self.files

    def _search(self, name: str, own_path: str) -> Optional[Evidence]:
        needle = name.encode()
        for path in self._files():
            display = self.display(path)
            if display == own_path:
                continue
            try:
                data = path.read_bytes()
            except OSError:
                continue
            if needle in data:
                line = defined_at(data.decode("utf-8", "replace").splitlines(), name)
                if line is not None:
                    return Evidence(display, line, f"defines '{name}'")
        return None
