"""Library entry points: lint paths, the configured implementations, or a string."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional, Sequence, Union

import libcst as cst

from lint import fix as fixer
from lint import suppress
from lint.config import Config
from lint.findings import FileError, Finding
from lint.locate import MethodSite, find_method, find_methods
from lint.analysis import MethodAnalysis, analyze_method
from lint.rules import ALL_RULES, FIXABLE_CODES, GroupRule, MethodRule
from lint.source import (
    Candidate,
    SourceFile,
    count_lines,
    discover,
    display_path,
    encode,
    explicit_problem,
    load,
    passes_prefilter,
    read,
)
from lint.unit import ParsedMethod, WholeModule, parse_in_module, parse_snippet

@dataclass
class Result:
    findings: list[Finding] = field(default_factory=list)
    errors: list[FileError] = field(default_factory=list)
    fixed: list[str] = field(default_factory=list)  # "path: what was changed"
    files_seen: int = 0
    files_parsed: int = 0
    lines_seen: int = 0
    methods: int = 0

    @property
    def exit_code(self) -> int:
        if self.errors:
            return 2
        return 1 if self.findings else 0


@dataclass
class FileAnalysis:
    source: SourceFile
    methods: list[MethodAnalysis]


class _Unparsable(Exception):
    pass


def _parse_sites(source: SourceFile, sites: list[MethodSite], force_whole: bool) -> list[ParsedMethod]:
    whole = WholeModule(source.text)
    parsed: list[ParsedMethod] = []
    for site in sites:
        unit = None if force_whole else parse_snippet(source.lines, site)
        if unit is None:
            found = parse_in_module(whole, site)
            if isinstance(found, str):
                raise _Unparsable(found)
            unit = found
        parsed.append(unit)
    if not force_whole and len(parsed) > 1 and any(p.prefix is None for p in parsed):
        # one parse mode per file, so that fixes apply in a single pass
        return _parse_sites(source, sites, True)
    return parsed


def analyze(source: SourceFile, sites: list[MethodSite], config: Config,
            force_whole: bool = False) -> Union[FileAnalysis, FileError]:
    try:
        parsed = _parse_sites(source, sites, force_whole)
    except cst.ParserSyntaxError as exc:
        return FileError(source.display, f"libcst cannot parse this file: {exc.message}")
    except _Unparsable as exc:
        return FileError(source.display, str(exc))
    methods = [analyze_method(p, source.display, config.reduce_calls, source.lines) for p in parsed]
    return FileAnalysis(source, methods)


def method_findings(method: MethodAnalysis, config: Config) -> list[Finding]:
    if method.skip_reason is not None:
        return []
    out: list[Finding] = []
    for rule in ALL_RULES:
        if issubclass(rule, MethodRule) and config.enabled(rule.code):
            out.extend(rule().check(method))
    return out


def group_findings(methods: list[MethodAnalysis], config: Config) -> list[Finding]:
    out: list[Finding] = []
    for rule in ALL_RULES:
        if issubclass(rule, GroupRule) and config.enabled(rule.code):
            out.extend(rule().check_group(methods))
    return out


def _fix_file(analysis: FileAnalysis, config: Config) -> tuple[Optional[str], list[str]]:
    """New text for the file (None if nothing to fix) and notes on what changed."""
    todo = []
    for method in analysis.methods:
        live = suppress.apply(method_findings(method, config),
                              [(method.path, method.site, analysis.source.lines)], config)
        codes = {f.code for f in live if f.fixable}
        if codes & FIXABLE_CODES:
            todo.append((method, codes))
    if not todo:
        return None, []
    source = analysis.source
    notes: list[str] = []
    lines = list(source.lines)
    whole_module: Optional[cst.Module] = None
    whole_edits = fixer.Edits()
    for method, codes in sorted(todo, key=lambda item: -item[0].site.first_line):
        if method.parsed.prefix is None:
            fixer.plan(method, codes, source.text, whole_edits)
            whole_module = method.parsed.module
            continue
        edits = fixer.Edits()
        fixer.plan(method, codes, source.text, edits)
        if edits.empty():
            continue
        lines = fixer.splice(lines, method.parsed, fixer.apply(method.parsed.module, edits))
        notes.extend(edits.notes)
    if whole_module is not None and not whole_edits.empty():
        notes.extend(whole_edits.notes)
        return fixer.apply(whole_module, whole_edits).code, notes
    return ("".join(lines) if notes else None), notes


class Linter:
    """Collects per-file analyses, then runs group rules and suppressions."""

    def __init__(self, config: Config, fix: bool = False, extra_methods: Iterable[str] = (),
                 skip_empty: bool = False) -> None:
        self.config = config
        self.fix = fix
        self.skip_empty = skip_empty
        self.result = Result()
        self.analyses: list[FileAnalysis] = []
        names = set(config.methods) | set(extra_methods)
        self.method_names = frozenset(names)
        self.needles = [n.encode() for n in sorted(names)]

    def lint_text(self, text: str, display: str, sites: Optional[list[MethodSite]] = None,
                  path: Optional[Path] = None, source: Optional[SourceFile] = None
                  ) -> Optional[FileAnalysis]:
        if source is None:
            loaded = load(Candidate(path or Path(display), display, True), text.encode())
            if isinstance(loaded, FileError):
                self.result.errors.append(loaded)
                return None
            source = loaded
        if sites is None:
            sites = find_methods(source.tree, self.method_names)
        if not sites:
            return None
        self.result.files_parsed += 1
        try:
            analysis = analyze(source, sites, self.config)
        except Exception as exc:  # keep linting the other files; say what broke
            analysis = FileError(display, f"internal error while analyzing: {type(exc).__name__}: {exc}")
        if isinstance(analysis, FileError):
            self.result.errors.append(analysis)
            return None
        if self.fix and path is not None:
            analysis = self._apply_fixes(analysis, sites, path)
        self.analyses.append(analysis)
        self.result.methods += len(analysis.methods)
        return analysis

    def _apply_fixes(self, analysis: FileAnalysis, sites: list[MethodSite], path: Path) -> FileAnalysis:
        source = analysis.source
        try:
            new_text, notes = _fix_file(analysis, self.config)
        except Exception as exc:  # a fix we cannot make leaves the file as it was
            self.result.errors.append(FileError(
                source.display, f"internal error while fixing: {type(exc).__name__}: {exc}"))
            return analysis
        if new_text is None or new_text == source.text:
            return analysis
        data = encode(new_text, source.bom, source.encoding)
        reloaded = load(Candidate(path, source.display, True), data)
        names = {(s.class_qualname, s.method) for s in sites}
        again: Union[FileAnalysis, FileError] = FileError(source.display, "fixed text does not parse")
        if not isinstance(reloaded, FileError):
            new_sites = [s for s in find_methods(reloaded.tree, frozenset(m for _, m in names))
                         if (s.class_qualname, s.method) in names]
            again = analyze(reloaded, new_sites, self.config)
        if isinstance(again, FileError):
            self.result.errors.append(FileError(
                source.display, f"fix not applied: {again.message}"))
            return analysis
        try:
            path.write_bytes(data)
        except OSError as exc:
            self.result.errors.append(FileError(source.display, f"cannot write fix: {exc.strerror or exc}"))
            return analysis
        self.result.fixed.extend(f"{source.display}: {note}" for note in notes)
        return again

    def lint_candidate(self, candidate: Candidate) -> None:
        data = read(candidate)
        if isinstance(data, FileError):
            self.result.errors.append(data)
            return
        self.result.files_seen += 1
        self.result.lines_seen += count_lines(data)
        if candidate.explicit:
            if self.skip_empty and not data.strip():
                return  # a hook passing every staged file: an empty one holds no method
            problem = explicit_problem(data, candidate.display)
            if problem is not None:
                self.result.errors.append(problem)
                return
        if not passes_prefilter(data, self.needles):
            return
        source = load(candidate, data)
        if isinstance(source, FileError):
            self.result.errors.append(source)
            return
        self.lint_text(source.text, candidate.display, path=candidate.path, source=source)

    def finish(self, group: Optional[list[MethodAnalysis]] = None) -> Result:
        findings: list[Finding] = []
        every = [m for a in self.analyses for m in a.methods]
        for method in every:
            try:
                findings.extend(method_findings(method, self.config))
            except Exception as exc:  # one broken method must not hide the rest
                self.result.errors.append(FileError(
                    method.path, f"internal error while checking {method.qualname}: "
                                 f"{type(exc).__name__}: {exc}"))
        findings.extend(group_findings(every if group is None else group, self.config))
        findings = suppress.apply(
            findings,
            [(m.path, m.site, a.source.lines) for a in self.analyses for m in a.methods],
            self.config,
        )
        self.result.findings = sorted(set(findings), key=Finding.sort_key)
        self.result.errors.sort(key=lambda e: (e.path, e.message))
        return self.result


def lint_paths(paths: Sequence[Union[str, Path]], config: Optional[Config] = None, *,
               fix: bool = False, skip_empty: bool = False) -> Result:
    """Lint files and directories (recursed for *.py).

    skip_empty: skip empty files named explicitly instead of reporting them.
    """
    linter = Linter(config or Config(), fix=fix, skip_empty=skip_empty)
    candidates, errors = discover(str(p) for p in paths)
    linter.result.errors.extend(errors)
    for candidate in candidates:
        linter.lint_candidate(candidate)
    return linter.finish()


def lint_repo(config: Config, *, fix: bool = False) -> Result:
    """Lint the configured implementations; drift is compared among them only."""
    linter = Linter(config, fix=fix, extra_methods=(i.method for i in config.implementations))
    if not config.implementations:
        where = display_path(config.source) if config.source else "pyproject.toml"
        linter.result.errors.append(FileError(
            where, "[tool.hicache-lint] implementations is empty or missing; --repo needs "
                   "entries like 'caches/x.py::Class.can_terminate_prefetch'"))
        return linter.finish()
    where = display_path(config.source) if config.source else "pyproject.toml"
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
        data = read(candidate)
        if isinstance(data, FileError):
            linter.result.errors.append(data)
            continue
        linter.result.files_seen += 1
        linter.result.lines_seen += count_lines(data)
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
        others = [s for s in find_methods(source.tree, linter.method_names)
                  if (s.class_qualname, s.method) not in {(w.class_qualname, w.method) for w in wanted}]
        analysis = linter.lint_text(source.text, display, sites=wanted + others, path=path, source=source)
        if analysis is not None:
            keys = {(w.class_qualname, w.method) for w in wanted}
            group.extend(m for m in analysis.methods if (m.site.class_qualname, m.site.method) in keys)
    return linter.finish(group=group)


def lint_source(text: str, config: Optional[Config] = None, path: str = "example.py") -> Result:
    """Lint a string as if it were a file (used by rule examples and tests)."""
    linter = Linter(config or Config())
    linter.lint_text(text, path)
    return linter.finish()


def fix_source(text: str, config: Optional[Config] = None, path: str = "example.py") -> str:
    """The text after applying every available fix once."""
    config = config or Config()
    linter = Linter(config)
    loaded = load(Candidate(Path(path), path, True), text.encode())
    if isinstance(loaded, FileError):
        raise ValueError(str(loaded))
    sites = find_methods(loaded.tree, linter.method_names)
    if not sites:
        return text
    analysis = analyze(loaded, sites, config)
    if isinstance(analysis, FileError):
        raise ValueError(str(analysis))
    new_text, _ = _fix_file(analysis, config)
    return text if new_text is None else new_text
