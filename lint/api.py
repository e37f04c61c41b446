"""The run, and the library's entry points: lint paths, the configured implementations
(or the project), or a string.

A run analyzes every file, then fixes (or previews fixes), then reports.
Fixes wait until every file is analyzed, so that a fix can take its spelling
from the files linted with it (lint/fix/). Without fixes to plan, each
file's syntax trees are released once its methods' rules have run, so a long
run holds one file's trees at a time. Rules that depend on the whole run (a
guard is owed, drift, suppressions, the baseline) run in `finish`.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Optional, Sequence, TypeVar, Union

from lint import baseline, suppress
from lint.config import Config, repo_root
from lint.findings import FileError, Finding
from lint.ignore import Ignores
from lint.locate import MethodSite, find_method, find_methods
from lint.pools import ClassPools, Evidence, FileSearch
from lint.result import Result, plural
from lint.rules import ALL_RULES, GroupRule, MethodRule
from lint.rules.pools_unseen import PoolsUnseen
from lint.selection import Selection, selection as select_rules
from lint.source import Candidate, SourceFile, discover, display_path, explicit_problem, load, read

if TYPE_CHECKING:
    from lint.analysis import MethodAnalysis
    from lint.file_analysis import FileAnalysis

__all__ = ["Linter", "Result", "fix_source", "lint_paths", "lint_repo", "lint_source"]
T = TypeVar("T")


def ignores_for(config: Config, start: Path) -> Ignores:
    return Ignores(config.exclude + config.extend_exclude, config.root, config.respect_gitignore,
                   repo_root(Path(start).resolve()))


class Linter:
    """Collects per-file analyses; `finish` fixes, runs group rules, suppressions and the baseline."""

    def __init__(self, config: Config, fix: bool = False, skip_empty: bool = False, diff: bool = False,
                 fixability: bool = True, selection: Optional[Selection] = None) -> None:
        self.config = config
        self.selection = selection or select_rules(config)
        # whether findings say if --fix would fix them (a planned fix, re-linted); costs a re-lint
        self.fixability = fixability
        self.fix = fix or diff
        self.write = fix and not diff
        self.skip_empty = skip_empty
        self.keep_trees = self.fix or fixability
        self.result = Result(fail_on_warnings=config.fail_on_warnings)
        self.analyses: list["FileAnalysis"] = []
        names = set(config.methods) | {i.method for i in config.implementations}
        self.method_names = frozenset(names)
        self.needles = [n.encode() for n in sorted(names)]
        self.read_paths: list[Path] = []  # every file read, searched for a flag-like name HC101 names
        self.class_pools = ClassPools(config.pool_fields, display_path, config.completion_flag)
        # where the completion flag and the names HC101 reads are, beyond a method's own file
        self.search = FileSearch([lambda: self.read_paths, self.configured_files, self.tree_files], display_path,
                                 config.completion_flag)

    # ------------------------------------------------------------- collecting
    def lint_text(self, text: str, display: str, sites: Optional[list["MethodSite"]] = None,
                  path: Optional[Path] = None, source: Optional[SourceFile] = None
                  ) -> Optional["FileAnalysis"]:
        from lint.file_analysis import analyze  # loads libcst: only for a file that has a candidate method

        source = source or self.kept(load(Candidate(path or Path(display), display, True), text.encode()))
        if source is None:
            return None
        if sites is None:
            sites = find_methods(source.tree, self.method_names)
        if not sites:
            return None
        self.result.files_parsed += 1
        try:
            analysis = self.kept(analyze(source, sites, self.config, path, self.class_pools))
        except Exception as exc:  # keep linting the other files; say what broke
            analysis = self.kept(FileError(display, f"internal error while analyzing: {type(exc).__name__}: {exc}"))
        if analysis is None:
            return None
        for method in analysis.methods:
            if method.commit is not None and method.commit.missing:
                self.result.errors.append(FileError(display, (
                    f"implementation '{method.implementation}': class {method.site.class_qualname} has no "
                    f"commit method {', '.join(method.commit.missing)}")))
        self.search.note_flag(display, source.text)
        if not self.keep_trees:
            self._run_method_rules(analysis)
        self.analyses.append(analysis)
        self.result.methods += len(analysis.methods)
        return analysis

    def _run_method_rules(self, analysis: "FileAnalysis") -> None:
        for method in analysis.methods:
            method.findings = self._checked(self.own, method)
        analysis.release()

    def _checked(self, check: Callable[["MethodAnalysis"], list[Finding]], method: "MethodAnalysis") -> list[Finding]:
        try:
            return check(method)
        except Exception as exc:  # one broken method must not hide the rest
            self.result.errors.append(FileError(
                method.path, f"internal error while checking {method.qualname}: {type(exc).__name__}: {exc}"))
            return []

    @property
    def seen(self) -> list[Path]:
        """The files read, for fix evidence beyond the linted methods (when fixing)."""
        return self.read_paths if self.fix else []

    def kept(self, got: Union[T, FileError]) -> Optional[T]:
        """`got`, or None with the error recorded."""
        if isinstance(got, FileError):
            self.result.errors.append(got)
            return None
        return got

    def open(self, candidate: Candidate, prefilter: bool = True) -> Optional[SourceFile]:
        """The file as parsed source; None when it is unreadable or refused (errors recorded), or, with `prefilter`,
        names no candidate method. A file named explicitly must be non-empty Python text."""
        data = self.kept(read(candidate))
        if data is None:
            return None
        self.result.files_seen += 1
        self.read_paths.append(candidate.path)
        if candidate.explicit:
            if self.skip_empty and not data.strip():
                return None  # a hook passing every staged file: an empty one holds no method
            problem = explicit_problem(candidate, data)
            if problem is not None:
                self.result.errors.append(problem)
                return None
        if prefilter and not any(needle in data for needle in self.needles):
            if self.config.completion_flag.encode() in data:
                self.search.note_flag(candidate.display, data.decode("utf-8", "replace"))
            return None
        return self.kept(load(candidate, data))

    # ------------------------------------------------- where the flag may be
    def configured_files(self) -> list[Path]:
        return sorted({self.config.root / i.path for i in self.config.implementations})

    def tree_files(self) -> Iterable[Path]:
        """The project tree: the configuration's folder, else the repository of the first linted file."""
        if self.config.source is not None:
            root: Optional[Path] = self.config.root
        else:
            root = repo_root((self.read_paths[0] if self.read_paths else Path.cwd()).resolve())
        if root is None:
            return []
        found, _ = discover([str(root)], ignores_for(self.config, root))
        return [c.path for c in found]

    # ---------------------------------------------------------------- finish
    def own(self, method: "MethodAnalysis") -> list[Finding]:
        """The method's own rules' findings, before the run-wide checks."""
        if method.skip_reason is not None:
            return []
        if method.findings is not None:
            return list(method.findings)
        return [finding for rule in ALL_RULES if issubclass(rule, MethodRule) and self.selection.enabled(rule.code)
                for finding in rule().check(method)]

    def owed(self, method: "MethodAnalysis") -> list[Finding]:
        """The method's findings, HC101-HC103 kept (their evidence named) only where a guard is owed (see
        lint/pools.py); where the configuration expects extra pools the code does not show, an HC109 note
        takes their place."""
        findings = self.own(method)
        gated = [f for f in findings if f.code in OWED_CODES]
        if not gated:
            return findings
        kept = [f for f in findings if f.code not in OWED_CODES]
        pools = method.pools
        flag = self.search.flag_at() if pools is not None else None

        def owed_with(evidence: str) -> list[Finding]:
            also = _lookalikes(method, self.search) if method.lookalikes else ""
            return kept + [replace(f, evidence=evidence + (also if f.code == "HC101" else "")) for f in gated]

        if pools is not None and flag is not None:
            return owed_with(f"extra pools: {pools.describe()}; their completion flag: {flag.describe()}")
        impl = method.implementation
        if pools is not None and impl is not None and impl.configured:
            renamed = self.search.renamed(method.lines)
            if renamed is not None:
                # the class still has its pools and the flag is gone, but a name like it is bound: renamed.
                # That fails the run, or renaming the flag everywhere would turn every guard check off.
                return owed_with(f"extra pools: {pools.describe()}; its completion flag '{method.flag}' "
                                 f"(completion-flag) is defined and read nowhere in {NOWHERE}, and "
                                 f"{renamed.describe()}: if the flag was renamed, set completion-flag to the new name")
        if impl is not None and impl.extra_pools:
            kept.append(_pools_unseen(method, pools, flag if pools is not None else self.search.flag_at()))
        return kept

    def live(self, method: "MethodAnalysis", analysis: "FileAnalysis") -> list[Finding]:
        """This method's own findings that survive its suppression comments."""
        return suppress.apply(self.owed(method), [(method.path, method.site, analysis.source.lines)],
                              self.selection.enabled)

    def finish(self, group: Optional[list["MethodAnalysis"]] = None) -> Result:
        if self.fix:
            from lint.fix import FixRun

            group = FixRun(self).fix_all(group)
        findings: list[Finding] = []
        every = sorted((m for a in self.analyses for m in a.methods), key=lambda m: (m.path, m.def_line))
        for method in every:
            findings.extend(self._checked(self.owed, method))
        members = every if group is None else sorted(group, key=lambda m: (m.path, m.def_line))
        for rule in ALL_RULES:
            if issubclass(rule, GroupRule) and self.selection.enabled(rule.code):
                findings.extend(rule().check_group(members))
        # the commit methods checked with a method carry suppression comments too
        findings = suppress.apply(
            findings,
            [(m.path, site, a.source.lines) for a in self.analyses for m in a.methods
             for site in [m.site, *(m.commit.sites.values() if m.commit is not None else ())]],
            self.selection.enabled,
        )
        if self.config.baseline is not None:  # findings it holds are left out
            findings, self.result.baselined = baseline.left_out(findings, self.config.baseline)
        if self.fixability and self.analyses:
            from lint.fix import FixRun

            findings = FixRun(self).mark_fixable(findings)
        self.result.findings = sorted(set(findings), key=Finding.sort_key)
        self.result.errors.sort(key=lambda e: (e.path, e.message))
        return self.result


OWED_CODES = frozenset({"HC101", "HC102", "HC103"})
NOWHERE = "the linted files, the configured implementations or the project tree"


def _lookalikes(method: "MethodAnalysis", search: FileSearch) -> str:
    """Where each flag-like name HC101 reads is defined, if anywhere searched."""
    parts = []
    for name, _ in method.lookalikes:
        found = search.defined(name, method.path, method.lines)
        parts.append(found.describe() if found is not None else f"nothing in {NOWHERE} defines '{name}'")
    return "".join(f"; {part}" for part in parts)


def _pools_unseen(method: "MethodAnalysis", pools: Optional[Evidence], flag: Optional[Evidence]) -> Finding:
    """HC109: the configuration expects extra pools; the evidence missing for a guard to be owed."""
    missing = []
    if pools is None:
        missing.append("no line of the class, the module functions it calls or its base classes brings "
                       "extra-pool transfers in")
    if flag is None:
        missing.append(f"no '{method.flag}' flag exists in {NOWHERE}")
    return PoolsUnseen.finding(
        method, method.def_line, method.def_col,
        f"{method.qualname} is configured with extra-pools = true, but {' and '.join(missing)}: its "
        f"pool-transfer guard is not checked until both exist")


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
        source = linter.open(candidate)
        if source is not None:
            linter.lint_text(source.text, candidate.display, path=candidate.path, source=source)
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
    from lint.fix import FixRun

    linter = Linter(config or Config(), diff=True)
    analysis = linter.lint_text(text, path, path=Path(path))
    if analysis is None:
        if linter.result.errors:
            raise ValueError(str(linter.result.errors[0]))
        return text
    return FixRun(linter).fixed_text(analysis) or text
