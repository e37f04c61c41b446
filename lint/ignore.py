"""What a directory walk leaves out: the `exclude` globs (ruff's defaults:
virtual environments, build outputs, VCS folders, site-packages) and, as git
does, `.gitignore` files (the repository root's `.git/info/exclude`, then every
`.gitignore` from the root down to the folder walked; the last matching line wins)."""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional


def _glob_regex(pattern: str) -> str:
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("/**", i) and i + 3 == len(pattern):
            out.append("/.*")
            i += 3
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 1:]:
            end = pattern.index("]", i + 1)
            out.append("[" + pattern[i + 1:end].replace("!", "^", 1) + "]")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return "".join(out)


@dataclass(frozen=True)
class IgnoreLine:
    base: str  # the folder of the .gitignore, absolute, '/'-separated
    regex: re.Pattern
    negate: bool
    dir_only: bool


def parse_gitignore(text: str, base: str) -> list[IgnoreLine]:
    rules = []
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        line = line[1:] if negate else line.removeprefix("\\")
        dir_only = line.endswith("/")
        line = line.rstrip("/")
        anchored = "/" in line
        body = _glob_regex(line.lstrip("/"))
        regex = re.compile(("" if anchored else "(?:.*/)?") + body + "$")
        rules.append(IgnoreLine(base, regex, negate, dir_only))
    return rules


@dataclass
class Ignores:
    """The exclusions of one run's directory walks."""

    patterns: tuple[str, ...]  # exclude globs: a bare name matches that name anywhere
    root: Path  # `exclude` globs with a '/' are relative to it
    gitignore: bool
    repo: Optional[Path] = None
    lines: list[IgnoreLine] = field(default_factory=list)
    loaded: set[str] = field(default_factory=set)

    def enter(self, folder: str) -> None:
        """Read the .gitignore files that apply in `folder` (its own, and its parents' up to the repository)."""
        if not self.gitignore or self.repo is None:
            return
        chain = []
        current = Path(folder)
        while True:
            chain.append(current)
            if current == self.repo or current.parent == current:
                break
            current = current.parent
        if self.repo == chain[-1] and str(self.repo) not in self.loaded:
            self._read(self.repo / ".git" / "info" / "exclude", self.repo)
        for directory in reversed(chain):
            if str(directory) not in self.loaded:
                self.loaded.add(str(directory))
                self._read(directory / ".gitignore", directory)

    def _read(self, file: Path, base: Path) -> None:
        try:
            text = file.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return
        self.lines.extend(parse_gitignore(text, Path(base).as_posix()))

    def excluded(self, path: str, is_dir: bool) -> bool:
        name = os.path.basename(path)
        try:
            relative = Path(os.path.relpath(path, self.root)).as_posix()
        except ValueError:
            relative = name
        for pattern in self.patterns:
            pattern = pattern.rstrip("/")
            if fnmatch.fnmatch(name, pattern) or ("/" in pattern and fnmatch.fnmatch(relative, pattern)):
                return True
        return self._git_ignored(Path(path).as_posix(), is_dir)

    def _git_ignored(self, posix: str, is_dir: bool) -> bool:
        ignored = False
        for line in self.lines:
            if not posix.startswith(line.base + "/") or (line.dir_only and not is_dir):
                continue
            if line.regex.match(posix[len(line.base) + 1:]):
                ignored = not line.negate
        return ignored
