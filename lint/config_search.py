"""Which `[tool.hicache-lint]` table a run uses.

From each linted path upward, the nearest pyproject.toml with the table; else
from the current directory upward; else a pyproject.toml with the table one
level below the repository root (SGLang keeps its own in `python/`). Without
any, the defaults, rooted at the repository root (or the current directory).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Optional

from lint.config import SECTION, Config, config_at
from lint.errors import LintConfigError


def repo_root(start: Path) -> Optional[Path]:
    """The nearest directory at or above `start` holding `.git` (a folder, or a worktree's file)."""
    for directory in (start, *start.parents):
        if (directory / ".git").exists():
            return directory
    return None


def _table_at(candidate: Path) -> Optional[Config]:
    return config_at(candidate, candidate.parent, candidate) if candidate.is_file() else None


def walk_up(start: Path, memo: Optional[dict[Path, Optional[Config]]] = None) -> Optional[Config]:
    """The first pyproject.toml with our table at or above `start` (`memo`: per directory, for many paths)."""
    memo = {} if memo is None else memo
    for directory in (start, *start.parents):
        if directory not in memo:
            memo[directory] = _table_at(directory / "pyproject.toml")
        if memo[directory] is not None:
            return memo[directory]
    return None


def _below_root(root: Path) -> Optional[Config]:
    found = [c for c in (_table_at(p) for p in sorted(root.glob("*/pyproject.toml"))) if c is not None]
    if len(found) > 1:
        names = ", ".join(str(c.source) for c in found)
        raise LintConfigError(str(root), f"several pyproject.toml files below the repository root have a "
                                     f"[tool.{SECTION}] table ({names}); pass --config to choose one")
    return found[0] if found else None


def discover(start: Optional[Path] = None) -> Config:
    """The configuration for a run from `start` (the current directory) with no paths (`--repo`)."""
    return find([], start)


def find(paths: Iterable[str], cwd: Optional[Path] = None) -> Config:
    """The configuration for linting `paths` from `cwd`."""
    cwd = (cwd or Path.cwd()).resolve()
    chosen: Optional[Config] = None
    memo: dict[Path, Optional[Config]] = {}
    for raw in paths:
        path = Path(os.path.abspath(cwd / raw))  # not resolved: a link loop is reported later, as input
        found = walk_up(path if path.is_dir() else path.parent, memo)
        if found is None:
            continue
        if chosen is not None and found.source != chosen.source:
            raise LintConfigError(str(found.source), (
                f"the paths given fall under two [tool.{SECTION}] tables ({chosen.source} and "
                f"{found.source}); lint them in separate runs, or pass --config"))
        chosen = chosen or found
    if chosen is not None:
        return chosen
    found = walk_up(cwd, memo)
    if found is not None:
        return found
    root = repo_root(cwd)
    if root is not None:
        found = _below_root(root)
        if found is not None:
            return found
    return Config(root=root or cwd)
