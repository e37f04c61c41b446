"""The run: analyze every file, then fix (or preview fixes), then report.

Fixes wait until every file is analyzed, so that a fix can take its spelling
from the files linted with it (lint/fix_run.py). Without fixes to plan, each
file's syntax trees are released once its methods' rules have run, so a long
run holds one file's trees at a time. Rules that depend on the whole run (a
guard is owed, drift, suppressions, the baseline) run in `finish`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Optional, TypeVar, Union

from lint import baseline, guard_owed, suppress
from lint.config import Config
from lint.config_search import repo_root
from lint.findings import FileError, Finding
from lint.flag_names import DefinitionSearch
from lint.ignore import Ignores
from lint.locate import MethodSite
from lint.pools import ClassPools, Evidence, FlagSearch, flag_evidence
from lint.result import Result
from lint.rules import ALL_RULES, GroupRule, MethodRule
from lint.selection import Selection, selection as select_rules
from lint.source import NOT_PYTHON, Candidate, SourceFile, count_lines, discover, display_path, explicit_problem, \
    load, named_python, passes_prefilter, read

if TYPE_CHECKING:
    from lint.analysis import MethodAnalysis
    from lint.file_analysis import FileAnalysis

__all__ = ["Linter", "Result"]
T = TypeVar("T")


def extra_sites(method: "MethodAnalysis") -> list[MethodSite]:
    """Sites of the commit methods checked with this method (for their suppression comments)."""
    return list(method.commit.sites.values()) if method.commit is not None else []


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
        self.flag_seen: list[Evidence] = []  # where the run's own files hold the completion flag
        self.flags = FlagSearch(self.flag_seen, [self.configured_files, self.tree_files], display_path,
                                config.completion_flag)
        self.names = DefinitionSearch([lambda: self.read_paths, self.configured_files, self.tree_files],
                                      display_path)

    # ------------------------------------------------------------- collecting
    def lint_text(self, text: str, display: str, sites: Optional[list["MethodSite"]] = None,
                  path: Optional[Path] = None, source: Optional[SourceFile] = None
                  ) -> Optional["FileAnalysis"]:
        from lint.file_analysis import analyze  # loads libcst: only for a file that has a candidate method
        from lint.locate import find_methods

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
        self._note_flag(display, source.text)
        if not self.keep_trees:
            self._run_method_rules(analysis)
        self.analyses.append(analysis)
        self.result.methods += len(analysis.methods)
        return analysis

    def _note_flag(self, display: str, text: str) -> None:
        found = flag_evidence(display, text, self.config.completion_flag)
        if found is not None:
            self.flag_seen.append(found)

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

    def read(self, candidate: Candidate) -> Optional[bytes]:
        """The file's bytes, counted; None (and an error recorded) when unreadable."""
        data = self.kept(read(candidate))
        if data is None:
            return None
        self.result.files_seen += 1
        self.result.lines_seen += count_lines(data)
        self.read_paths.append(candidate.path)
        return data

    def open(self, candidate: Candidate, prefilter: bool = True) -> Optional[SourceFile]:
        """The file as parsed source; None when it is unreadable or refused (errors recorded), or, with `prefilter`,
        names no candidate method. A file named explicitly must be non-empty Python text."""
        data = self.read(candidate)
        if data is None:
            return None
        if candidate.explicit:
            if self.skip_empty and not data.strip():
                return None  # a hook passing every staged file: an empty one holds no method
            problem = explicit_problem(data, candidate.display)
            if problem is None and not named_python(candidate.path, data):
                problem = FileError(candidate.display, NOT_PYTHON)  # a README named by mistake, say
            if problem is not None:
                self.result.errors.append(problem)
                return None
        if prefilter and not passes_prefilter(data, self.needles):
            if self.config.completion_flag.encode() in data:
                self._note_flag(candidate.display, data.decode("utf-8", "replace"))
            return None
        return self.kept(load(candidate, data))

    def lint_candidate(self, candidate: Candidate) -> None:
        source = self.open(candidate)
        if source is not None:
            self.lint_text(source.text, candidate.display, path=candidate.path, source=source)

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
        """The method's findings, HC101-HC103 kept only where a guard is owed."""
        return guard_owed.owed(self.own(method), method, self.flags, self.names)

    def live(self, method: "MethodAnalysis", analysis: "FileAnalysis") -> list[Finding]:
        """This method's own findings that survive its suppression comments."""
        return suppress.apply(self.owed(method), [(method.path, method.site, analysis.source.lines)],
                              self.selection.enabled)

    def finish(self, group: Optional[list["MethodAnalysis"]] = None) -> Result:
        if self.fix:
            from lint.fix_run import FixRun

            group = FixRun(self).fix_all(group)
        findings: list[Finding] = []
        every = sorted((m for a in self.analyses for m in a.methods), key=lambda m: (m.path, m.def_line))
        for method in every:
            findings.extend(self._checked(self.owed, method))
        members = every if group is None else sorted(group, key=lambda m: (m.path, m.def_line))
        for rule in ALL_RULES:
            if issubclass(rule, GroupRule) and self.selection.enabled(rule.code):
                findings.extend(rule().check_group(members))
        findings = suppress.apply(
            findings,
            [(m.path, site, a.source.lines) for a in self.analyses for m in a.methods
             for site in [m.site, *extra_sites(m)]],
            self.selection.enabled,
        )
        if self.config.baseline is not None:  # findings it holds are left out
            findings, self.result.baselined = baseline.left_out(findings, self.config.baseline)
        if self.fixability and self.analyses:
            from lint.fix_run import FixRun

            findings = FixRun(self).mark_fixable(findings)
        self.result.findings = sorted(set(findings), key=Finding.sort_key)
        self.result.errors.sort(key=lambda e: (e.path, e.message))
        return self.result
