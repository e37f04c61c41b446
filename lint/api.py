"""Library entry points: lint paths, the configured implementations (or the project), or a string."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence, Union

from lint.config import Config
from lint.engine import Linter, ignores_for
from lint.findings import FileError
from lint.locate import MethodSite, find_method, find_methods
from lint.result import Result, plural
from lint.selection import Selection
from lint.source import Candidate, discover, display_path

if TYPE_CHECKING:
    from lint.analysis import MethodAnalysis

__all__ = ["Linter", "Result", "fix_source", "lint_paths", "lint_repo", "lint_source"]


def lint_paths(paths: Sequence[Union[str, Path]], config: Optional[Config] = None, *,
               fix: bool = False, skip_empty: bool = False, diff: bool = False,
               fixability: bool = False, selection: Optional[Selection] = None,
               allow_empty: bool = False) -> Result:
    """Lint files and directories (recursed for *.py, without the excluded and git-ignored).

    fix: write fixes; diff: compute them as a unified diff and write nothing;
    skip_empty: skip empty files named explicitly instead of reporting them;
    fixability: mark each finding fixable or not (a re-lint of each planned fix).
    A run given a directory that checks no method, or a directory holding no Python file,
    reports it (exit 2) unless allow_empty; files named one by one (as pre-commit passes
    them) may hold none, but must be Python.
    """
    config = config or Config()
    linter = Linter(config, fix=fix, skip_empty=skip_empty, diff=diff, fixability=fixability, selection=selection)
    names = [str(p) for p in paths]
    start = next((Path(p) for p in names if Path(p).is_dir()), None)
    candidates, errors = discover(names, ignores_for(config, start) if start is not None else None,
                                  allow_empty=allow_empty)
    linter.result.errors.extend(errors)
    for candidate in candidates:
        linter.lint_candidate(candidate)
    result = linter.finish()
    if start is not None and not allow_empty and result.methods == 0 and not result.errors:
        # a folder or project run that checked no method: the configuration (or the path) is wrong
        result.errors.append(FileError(display_path(start), (
            f"no method named {', '.join(sorted(linter.method_names))} found in "
            f"{plural(result.files_seen, 'Python file')}; check the path and [tool.hicache-lint] methods, "
            f"or pass --allow-empty")))
    return result


def lint_repo(config: Config, *, fix: bool = False, diff: bool = False, fixability: bool = False,
              selection: Optional[Selection] = None, allow_empty: bool = False) -> Result:
    """Lint the configured implementations (drift compared among them only); with
    none configured, every candidate method under the configuration's folder."""
    if not config.implementations:
        return lint_paths([config.root], config, fix=fix, diff=diff, fixability=fixability, selection=selection,
                          allow_empty=allow_empty)
    linter = Linter(config, fix=fix, diff=diff, fixability=fixability, selection=selection)
    where = display_path(config.source) if config.source else "pyproject.toml"
    by_file: dict[Path, list] = {}
    for impl in config.implementations:
        by_file.setdefault(config.root / impl.path, []).append(impl)
    group: list["MethodAnalysis"] = []
    for path, impls in by_file.items():
        display = display_path(path)
        if not path.is_file():
            for impl in impls:
                linter.result.errors.append(FileError(
                    where, f"implementation '{impl}': file {display} does not exist"))
            continue
        source = linter.open(Candidate(path, display, True), prefilter=False)
        if source is None:
            continue
        wanted: list[MethodSite] = []
        for impl in impls:
            site = find_method(source.tree, impl.class_qualname, impl.method)
            if isinstance(site, str):
                linter.result.errors.append(FileError(where, f"implementation '{impl}': {site} in {display}"))
            else:
                wanted.append(site)
        keys = {(w.class_qualname, w.method) for w in wanted}
        others = [s for s in find_methods(source.tree, linter.method_names) if (s.class_qualname, s.method) not in keys]
        analysis = linter.lint_text(source.text, display, sites=wanted + others, path=path, source=source)
        if analysis is not None:
            group.extend(m for m in analysis.methods if (m.site.class_qualname, m.site.method) in keys)
    return linter.finish(group=group)


def lint_source(text: str, config: Optional[Config] = None, path: str = "example.py") -> Result:
    """Lint a string as if it were a file (used by rule examples and tests)."""
    linter = Linter(config or Config())
    linter.lint_text(text, path)
    return linter.finish()


def fix_source(text: str, config: Optional[Config] = None, path: str = "example.py") -> str:
    """The text after applying every available fix once (checked as `--fix` checks it)."""
    from lint.fix_run import FixRun

    linter = Linter(config or Config(), diff=True)
    analysis = linter.lint_text(text, path, path=Path(path))
    if analysis is None:
        if linter.result.errors:
            raise ValueError(str(linter.result.errors[0]))
        return text
    return FixRun(linter).fixed_text(analysis) or text
