"""The run: analyze every file, then fix (or preview fixes), then report.

Fixes wait until every file is analyzed, so that a fix can take its spelling
from the files linted with it. Each fixed file is linted again before it is
written, and a method's fix is kept only if it leaves no error behind.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable, Optional, Union

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from lint import suppress
from lint.analysis import MethodAnalysis, analyze_method
from lint.analysis.commit import analyze_commit
from lint.analysis.commit_state import Signals
from lint.config import Config
from lint.findings import FileError, Finding
from lint.fix import Edits, Fixer, fix_text
from lint.fix.edits import apply
from lint.fix.spelling import Evidence, Kind, Read, file_reads, tree_reads
from lint.locate import MethodSite, find_methods
from lint.rules import ALL_RULES, ERROR, FIXABLE_CODES, GroupRule, MethodRule, level_of
from lint.source import Candidate, SourceFile, count_lines, encode, explicit_problem, load, passes_prefilter, read
from lint.unit import ParsedMethod, WholeModule, parse_in_module, parse_snippet


@dataclass
class Result:
    findings: list[Finding] = field(default_factory=list)
    errors: list[FileError] = field(default_factory=list)
    fixed: list[str] = field(default_factory=list)  # "path: what was changed"
    declined: list[str] = field(default_factory=list)  # "path: why a finding was not fixed"
    diff: str = ""  # unified diff of the fixes (--diff)
    files_seen: int = 0
    files_parsed: int = 0
    lines_seen: int = 0
    methods: int = 0
    fail_on_warnings: bool = False
    exit_zero: bool = False  # findings never fail the run (--exit-zero); errors still do

    @property
    def exit_code(self) -> int:
        if self.errors:
            return 2
        if self.exit_zero:
            return 0
        failing = [f for f in self.findings if self.fail_on_warnings or level_of(f.code) == ERROR]
        return 1 if failing else 0


@dataclass
class FileAnalysis:
    source: SourceFile
    methods: list[MethodAnalysis]
    path: Optional[Path]  # on disk (None: text given directly)


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
            path: Optional[Path] = None) -> Union[FileAnalysis, FileError]:
    try:
        parsed = _parse_sites(source, sites, False)
    except cst.ParserSyntaxError as exc:
        return FileError(source.display, f"libcst cannot parse this file: {exc.message}")
    except _Unparsable as exc:
        return FileError(source.display, str(exc))
    where = path or Path(source.display)
    methods = []
    for unit in parsed:
        method = analyze_method(unit, source.display, config.reduce_calls, source.lines)
        impl = config.implementation_for(where, unit.site.class_qualname)
        method.implementation = impl
        if impl is not None and impl.guard == "commit":
            method.commit = analyze_commit(unit.site.index, impl.commit, impl.sidecar_fields,
                                           Signals(frozenset(impl.io_ended), frozenset(impl.allocation_fields)))
        methods.append(method)
    return FileAnalysis(source, methods, path)


def extra_sites(method: MethodAnalysis) -> list[MethodSite]:
    """Sites of the commit methods checked with this method (for their suppression comments)."""
    if method.commit is None:
        return []
    index, cls = method.site.index, method.site.class_qualname
    sites = []
    for name in method.commit.methods:
        func = index.methods[name]
        first = min([func.lineno] + [d.lineno for d in func.decorator_list])
        sites.append(MethodSite(cls, name, func.lineno, first, func.end_lineno or func.lineno,
                                func.col_offset, index))
    return sites


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


def _live(method: MethodAnalysis, analysis: FileAnalysis, config: Config) -> list[Finding]:
    """This method's own findings that survive its suppression comments."""
    return suppress.apply(method_findings(method, config),
                          [(method.path, method.site, analysis.source.lines)], config)


def _merged(per_file: Iterable[dict[Kind, list[Read]]]) -> dict[Kind, list[Read]]:
    """Reads of several files, kind by kind, in file order."""
    merged: dict[Kind, list[Read]] = {}
    for reads_by_kind in per_file:
        for kind, reads in reads_by_kind.items():
            merged.setdefault(kind, []).extend(reads)
    return merged


class Linter:
    """Collects per-file analyses; `finish` fixes, runs group rules and suppressions."""

    def __init__(self, config: Config, fix: bool = False, skip_empty: bool = False, diff: bool = False,
                 fixability: bool = True) -> None:
        self.config = config
        # whether findings say if --fix would fix them (a planned fix, re-linted); costs a re-lint
        self.fixability = fixability
        self.fix = fix or diff
        self.write = fix and not diff
        self.skip_empty = skip_empty
        self.result = Result(fail_on_warnings=config.fail_on_warnings)
        self.analyses: list[FileAnalysis] = []
        names = set(config.methods) | {i.method for i in config.implementations}
        self.method_names = frozenset(names)
        self.needles = [n.encode() for n in sorted(names)]
        self.seen: list[Path] = []  # every file read, for fix evidence beyond the linted methods
        self._run_reads_cache: Optional[dict[Kind, list[Read]]] = None
        self._configured_reads_cache: Optional[dict[Kind, list[Read]]] = None

    # ------------------------------------------------------------- collecting
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
            analysis = analyze(source, sites, self.config, path)
        except Exception as exc:  # keep linting the other files; say what broke
            analysis = FileError(display, f"internal error while analyzing: {type(exc).__name__}: {exc}")
        if isinstance(analysis, FileError):
            self.result.errors.append(analysis)
            return None
        for method in analysis.methods:
            if method.commit is not None and method.commit.missing:
                self.result.errors.append(FileError(display, (
                    f"implementation '{method.implementation}': class {method.site.class_qualname} has no "
                    f"commit method {', '.join(method.commit.missing)}")))
        self.analyses.append(analysis)
        self.result.methods += len(analysis.methods)
        return analysis

    def read(self, candidate: Candidate) -> Optional[bytes]:
        """The file's bytes, counted; None (and an error recorded) when unreadable."""
        data = read(candidate)
        if isinstance(data, FileError):
            self.result.errors.append(data)
            return None
        self.result.files_seen += 1
        self.result.lines_seen += count_lines(data)
        if self.fix:
            self.seen.append(candidate.path)
        return data

    def lint_candidate(self, candidate: Candidate) -> None:
        data = self.read(candidate)
        if data is None:
            return
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

    # ------------------------------------------------------------------ fixes
    def _run_reads(self) -> dict[Kind, list[Read]]:
        """Pool-field reads in every file of the run (computed once)."""
        if self._run_reads_cache is None:
            parsed = {a.path for a in self.analyses}
            self._run_reads_cache = _merged(
                [tree_reads(a.source.tree, a.source.lines) for a in self.analyses]
                + [file_reads(path) for path in self.seen if path not in parsed])
        return self._run_reads_cache

    def _configured_reads(self) -> dict[Kind, list[Read]]:
        """Pool-field reads in the configured implementations' files (computed once)."""
        if self._configured_reads_cache is None:
            self._configured_reads_cache = _merged(
                file_reads(path) for path in sorted({self.config.root / i.path for i in self.config.implementations}))
        return self._configured_reads_cache

    def _evidence(self, analysis: FileAnalysis) -> Evidence:
        source = analysis.source
        loaders: list[tuple[str, Callable[[], dict[Kind, list[Read]]]]] = [
            ("this file", lambda: tree_reads(source.tree, source.lines)),
            ("the files linted with it", self._run_reads),
            ("the configured implementations", self._configured_reads),
        ]
        return Evidence(loaders)

    def _fixer_for(self, analysis: FileAnalysis) -> Fixer:
        return Fixer(self.config, self._evidence(analysis))

    def _plans(self, analysis: FileAnalysis, fixer: Fixer, skip: set[str]
               ) -> tuple[list[tuple[MethodAnalysis, Edits]], list[str]]:
        plans: list[tuple[MethodAnalysis, Edits]] = []
        declined: list[str] = []
        where = analysis.path or Path(analysis.source.display)
        for method in analysis.methods:
            live = [f for f in _live(method, analysis, self.config) if f.code in FIXABLE_CODES]
            if not live or method.qualname in skip:
                continue
            plan = fixer.plan(method, live, where)
            if isinstance(plan, Edits):
                if not plan.empty():
                    plans.append((method, plan))
            elif plan is not None:
                declined.append(f"{analysis.source.display}: not fixed: {method.qualname}: {plan}")
        return plans, declined

    def _fixed(self, analysis: FileAnalysis, fixer: Optional[Fixer] = None, record: bool = True
               ) -> Optional[tuple[str, FileAnalysis, list[str], set[str]]]:
        """(new text, its analysis, notes, fixed methods), keeping only fixes that leave no error behind."""
        source = analysis.source
        fixer = fixer or self._fixer_for(analysis)
        skip: set[str] = set()
        notes: list[str] = []
        result: Optional[tuple[str, FileAnalysis, list[str], set[str]]] = None
        for _ in range(3):
            plans, declined = self._plans(analysis, fixer, skip)
            new_text = fix_text(source.lines, plans) if plans else None
            if new_text is None or new_text == source.text:
                notes.extend(declined)
                break
            again = self._reanalyze(analysis, new_text)
            if isinstance(again, FileError):
                if record:
                    self.result.errors.append(FileError(source.display, f"fix not applied: {again.message}"))
                return None
            fixed = {m.qualname for m, _ in plans}
            failed = self._still_failing(again, fixed)
            if not failed:
                notes.extend(declined)
                result = new_text, again, [note for _, edits in plans for note in edits.notes], fixed
                break
            for qualname, codes in failed.items():
                skip.add(qualname)
                notes.append(
                    f"{source.display}: not fixed: {qualname}: the fix would still leave {', '.join(codes)}")
        if record:
            self.result.declined.extend(notes)
        return result

    def fixed_text(self, analysis: FileAnalysis) -> Optional[str]:
        got = self._fixed(analysis)
        return got[0] if got else None

    def _fix_file(self, analysis: FileAnalysis) -> FileAnalysis:
        got = self._fixed(analysis)
        return analysis if got is None else self._commit_fix(analysis, *got[:3])

    def _reanalyze(self, analysis: FileAnalysis, new_text: str) -> Union[FileAnalysis, FileError]:
        source = analysis.source
        candidate = Candidate(analysis.path or Path(source.display), source.display, True)
        reloaded = load(candidate, encode(new_text, source.bom, source.encoding))
        if isinstance(reloaded, FileError):
            return FileError(source.display, "fixed text does not parse")
        names = {(m.site.class_qualname, m.site.method) for m in analysis.methods}
        sites = [s for s in find_methods(reloaded.tree, frozenset(n for _, n in names))
                 if (s.class_qualname, s.method) in names]
        return analyze(reloaded, sites, self.config, analysis.path)

    def _still_failing(self, again: FileAnalysis, fixed: set[str]) -> dict[str, list[str]]:
        failed: dict[str, list[str]] = {}
        for method in again.methods:
            if method.qualname not in fixed:
                continue
            codes = sorted({f.code for f in _live(method, again, self.config)
                            if f.code in FIXABLE_CODES and level_of(f.code) == ERROR})
            if codes:
                failed[method.qualname] = codes
        return failed

    def _commit_fix(self, analysis: FileAnalysis, new_text: str, again: FileAnalysis,
                    notes: list[str]) -> FileAnalysis:
        source = analysis.source
        if not self.write:
            self.result.diff += "".join(difflib.unified_diff(
                source.text.splitlines(keepends=True), new_text.splitlines(keepends=True),
                fromfile=f"a/{source.display}", tofile=f"b/{source.display}"))
            self.result.fixed.extend(f"{source.display}: would fix: {note}" for note in notes)
            return analysis  # a preview: report what the file still says
        assert analysis.path is not None
        try:
            analysis.path.write_bytes(encode(new_text, source.bom, source.encoding))
        except OSError as exc:
            self.result.errors.append(FileError(source.display, f"cannot write fix: {exc.strerror or exc}"))
            return analysis
        self.result.fixed.extend(f"{source.display}: {note}" for note in notes)
        return again

    # ---------------------------------------------------------------- finish
    def finish(self, group: Optional[list[MethodAnalysis]] = None) -> Result:
        if self.fix:
            for i, analysis in enumerate(self.analyses):
                if analysis.path is None:
                    continue
                try:
                    fixed = self._fix_file(analysis)
                except Exception as exc:  # a fix we cannot make leaves the file as it was
                    self.result.errors.append(FileError(
                        analysis.source.display, f"internal error while fixing: {type(exc).__name__}: {exc}"))
                    continue
                if fixed is not analysis and group is not None:
                    by_key = {(m.path, m.qualname): m for m in fixed.methods}
                    group = [by_key.get((m.path, m.qualname), m) for m in group]
                self.analyses[i] = fixed
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
            [(m.path, site, a.source.lines) for a in self.analyses for m in a.methods
             for site in [m.site, *extra_sites(m)]],
            self.config,
        )
        if self.fixability:
            findings = self._mark_fixable(findings)
        self.result.findings = sorted(set(findings), key=Finding.sort_key)
        self.result.errors.sort(key=lambda e: (e.path, e.message))
        return self.result

    def _fix_survives(self, method: MethodAnalysis, analysis: FileAnalysis, fixer: Fixer) -> bool:
        """Whether this method's fix leaves no error behind (re-linting only the method)."""
        parsed = method.parsed
        live = [f for f in _live(method, analysis, self.config) if f.code in FIXABLE_CODES]
        plan = fixer.plan(method, live, analysis.path or Path(analysis.source.display))
        if not isinstance(plan, Edits) or plan.empty():
            return False
        if parsed.prefix is None:  # parsed with its whole module: re-lint the whole fixed file
            got = self._fixed(analysis, fixer, record=False)
            return got is not None and method.qualname in got[3]
        module = apply(parsed.module, plan)
        func = next(n for n in module.body if isinstance(n, cst.FunctionDef))
        positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
        fixed = ParsedMethod(parsed.site, func, module, positions, parsed.line_offset, parsed.col_offset,
                             parsed.prefix)
        again = analyze_method(fixed, method.path, self.config.reduce_calls, method.lines)
        again.implementation = method.implementation
        return not any(f.code in FIXABLE_CODES and level_of(f.code) == ERROR
                       for f in _live(again, analysis, self.config))

    def _mark_fixable(self, findings: list[Finding]) -> list[Finding]:
        """A finding is fixable when its fix is planned and survives the re-lint."""
        owners: dict[tuple[str, Optional[str]], tuple[MethodAnalysis, FileAnalysis]] = {
            (m.path, m.qualname): (m, a) for a in self.analyses for m in a.methods}
        fixers: dict[int, Fixer] = {}
        survives: dict[int, bool] = {}
        out: list[Finding] = []
        for finding in findings:
            owner = owners.get((finding.path, finding.method))
            if finding.code in FIXABLE_CODES and owner is not None:
                method, analysis = owner
                if id(analysis) not in fixers:
                    fixers[id(analysis)] = self._fixer_for(analysis)
                fixer = fixers[id(analysis)]
                plan = fixer.plan_one(method, finding, analysis.path or Path(analysis.source.display))
                if id(method) not in survives and isinstance(plan, Edits):
                    survives[id(method)] = self._fix_survives(method, analysis, fixer)
                if isinstance(plan, Edits) and not plan.empty() and survives[id(method)]:
                    finding = replace(finding, fixable=True)
            out.append(finding)
        return out
