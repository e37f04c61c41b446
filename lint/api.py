"""Library entry points: lint paths, the configured implementations, or a string."""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence, Union

from lint.analysis import MethodAnalysis
from lint.config import Config
from lint.engine import FileAnalysis, Linter, Result, analyze
from lint.findings import FileError
from lint.locate import MethodSite, find_method, find_methods
from lint.source import Candidate, discover, display_path, explicit_problem, load

__all__ = ["FileAnalysis", "Linter", "Result", "fix_source", "lint_paths", "lint_repo", "lint_source"]


def lint_paths(paths: Sequence[Union[str, Path]], config: Optional[Config] = None, *,
               fix: bool = False, skip_empty: bool = False, diff: bool = False,
               fixability: bool = False) -> Result:
    """Lint files and directories (recursed for *.py).

    fix: write fixes; diff: compute them as a unified diff and write nothing;
    skip_empty: skip empty files named explicitly instead of reporting them;
    fixability: mark each finding fixable or not (a re-lint of each planned fix).
    """
    linter = Linter(config or Config(), fix=fix, skip_empty=skip_empty, diff=diff, fixability=fixability)
    candidates, errors = discover(str(p) for p in paths)
    linter.result.errors.extend(errors)
    for candidate in candidates:
        linter.lint_candidate(candidate)
    return linter.finish()


def lint_repo(config: Config, *, fix: bool = False, diff: bool = False, fixability: bool = False) -> Result:
    """Lint the configured implementations; drift is compared among them only."""
    linter = Linter(config, fix=fix, diff=diff, fixability=fixability)
    where = display_path(config.source) if config.source else "pyproject.toml"
    if not config.implementations:
        linter.result.errors.append(FileError(
            where, "[tool.hicache-lint] implementations is empty or missing; --repo needs "
                   "entries like 'caches/x.py::Class.can_terminate_prefetch'"))
        return linter.finish()
    by_file: dict[Path, list] = {}
    for impl in config.implementations:
        by_file.setdefault(config.root / impl.path, []).append(impl)
    group: list[MethodAnalysis] = []
    for path, impls in by_file.items():
        display = display_path(path)
        if not path.is_file():
            for impl in impls:
                linter.result.errors.append(FileError(
                    where, f"implementation '{impl}': file {display} does not exist"))
            continue
        candidate = Candidate(path, display, True)
        data = linter.read(candidate)
        if data is None:
            continue
        problem = explicit_problem(data, display)
        source = problem or load(candidate, data)
        if isinstance(source, FileError):
            linter.result.errors.append(source)
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
    linter = Linter(config or Config(), diff=True)
    loaded = load(Candidate(Path(path), path, True), text.encode())
    if isinstance(loaded, FileError):
        raise ValueError(str(loaded))
    sites = find_methods(loaded.tree, linter.method_names)
    if not sites:
        return text
    analysis = analyze(loaded, sites, linter.config, Path(path))
    if isinstance(analysis, FileError):
        raise ValueError(str(analysis))
    linter.analyses.append(analysis)
    return linter.fixed_text(analysis) or text
