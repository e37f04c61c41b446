"""Autofix: `--fix` and `--diff` over a run, and the fixability of findings.

Plans are made per method (lint/fix/guards.py), spelled from evidence
(lint/fix/spelling.py: the method, its file, the files linted with it and the
configured implementations) and applied as libcst edits (lint/fix/edits.py).
Each fixed file is linted again before it is written, and a method's fix is
kept only if it leaves no error behind; re-running finds nothing left to fix.
"""

from __future__ import annotations

import difflib
from dataclasses import replace
from functools import cached_property
from pathlib import Path
from typing import Callable, Optional, Protocol, Union

import libcst as cst

from lint.analysis import MethodAnalysis
from lint.config import Config
from lint.file_analysis import FileAnalysis, analyze
from lint.findings import FileError, Finding
from lint.fix.edits import Edits, apply, splice
from lint.fix.guards import GuardFixer, Plan
from lint.fix.spelling import Evidence, Kind, Read, file_reads, merged, tree_reads
from lint.locate import find_methods
from lint.pools import ClassPools
from lint.result import Result
from lint.rules import ERROR, FIXABLE_CODES, level_of
from lint.source import Candidate, encode, load

INSERT_CODES = ("HC101",)
REWORK_CODES = ("HC102", "HC103", "HC107")


class Fixer:
    """Plans fixes for findings, one method at a time."""

    def __init__(self, evidence: Evidence) -> None:
        self.evidence = evidence
        self._plans: dict[tuple[int, str, int], Plan] = {}

    def plan_one(self, method: MethodAnalysis, finding: Finding) -> Plan:
        key = (id(method), finding.code, finding.line)
        if key not in self._plans:
            fixer = GuardFixer(method, self.evidence)
            if finding.code in INSERT_CODES:
                plan = fixer.insert()
            else:
                guard = next((g for g in method.guards if g.line == finding.line), method.guard)
                plan = fixer.rework(guard, finding.code) if guard is not None else "no guard to fix"
            self._plans[key] = plan
        return self._plans[key]

    def plan(self, method: MethodAnalysis, findings: list[Finding]) -> Optional[Plan]:
        """The first fix among this method's findings (one per pass keeps edits apart)."""
        # upstream's form in an implementation without the fence is left as it is, by design
        wanted = [f for f in findings if f.code in INSERT_CODES + REWORK_CODES
                  and (f.code != "HC107" or method.fenced)]
        ordered = sorted(wanted, key=lambda f: ((INSERT_CODES + REWORK_CODES).index(f.code), f.line))
        reason: Optional[str] = None
        for finding in ordered:
            plan = self.plan_one(method, finding)
            if isinstance(plan, Edits):
                return plan
            reason = reason or plan
        return reason


def fix_text(lines: list[str], plans: list[tuple[MethodAnalysis, Edits]]) -> Optional[str]:
    """The file's new text with every method's edits applied (None: nothing changed)."""
    whole_module: Optional[cst.Module] = None
    whole_edits = Edits()
    lines = list(lines)
    changed = False
    for method, edits in sorted(plans, key=lambda item: -item[0].site.first_line):
        if edits.empty():
            continue
        if method.parsed.prefix is None:
            whole_edits.merge(edits)
            whole_module = method.parsed.module
            continue
        lines = splice(lines, method.parsed, apply(method.parsed.module, edits))
        changed = True
    if whole_module is not None and not whole_edits.empty():
        return apply(whole_module, whole_edits).code
    return "".join(lines) if changed else None


class LintRun(Protocol):
    """What a fix needs of the run (lint.api.Linter)."""

    config: Config
    result: Result
    analyses: list[FileAnalysis]
    seen: list[Path]  # every file read (when fixing)
    write: bool  # --fix (not --diff)
    class_pools: ClassPools

    def live(self, method: MethodAnalysis, analysis: FileAnalysis) -> list[Finding]: ...

    def configured_files(self) -> list[Path]: ...


class FixRun:
    """The fixes of one run; reads the linter's analyses and records into its result."""

    def __init__(self, linter: LintRun) -> None:
        self.linter, self.live = linter, linter.live
        self.config, self.result, self.analyses = linter.config, linter.result, linter.analyses

    def fix_all(self, group: Optional[list[MethodAnalysis]]) -> Optional[list[MethodAnalysis]]:
        """Fix every file; returns `group` with each fixed method's new analysis."""
        for i, analysis in enumerate(self.analyses):
            if analysis.path is None:
                continue
            try:
                got = self._fixed(analysis)
                fixed = analysis if got is None else self._commit_fix(analysis, *got[:3])
            except Exception as exc:  # a fix we cannot make leaves the file as it was
                self.result.errors.append(FileError(
                    analysis.source.display, f"internal error while fixing: {type(exc).__name__}: {exc}"))
                continue
            if fixed is not analysis and group is not None:
                by_key = {(m.path, m.qualname): m for m in fixed.methods}
                group = [by_key.get((m.path, m.qualname), m) for m in group]
            self.analyses[i] = fixed
        return group

    @cached_property
    def _run_reads(self) -> dict[Kind, list[Read]]:
        """Pool-field reads in every file of the run."""
        parsed = {a.path for a in self.analyses}
        flag = self.config.completion_flag
        return merged([tree_reads(a.source.tree, a.source.lines, flag) for a in self.analyses]
                      + [file_reads(path, flag) for path in self.linter.seen if path not in parsed])

    @cached_property
    def _configured_reads(self) -> dict[Kind, list[Read]]:
        """Pool-field reads in the configured implementations' files."""
        return merged(file_reads(path, self.config.completion_flag) for path in self.linter.configured_files())

    def _fixer_for(self, analysis: FileAnalysis) -> Fixer:
        source = analysis.source
        loaders: list[tuple[str, Callable[[], dict[Kind, list[Read]]]]] = [
            ("this file", lambda: tree_reads(source.tree, source.lines, self.config.completion_flag)),
            ("the files linted with it", lambda: self._run_reads),
            ("the configured implementations", lambda: self._configured_reads),
        ]
        return Fixer(Evidence(loaders, self.config.completion_flag))

    def _plans(self, analysis: FileAnalysis, fixer: Fixer, skip: set[str]
               ) -> tuple[list[tuple[MethodAnalysis, Edits]], list[str]]:
        plans: list[tuple[MethodAnalysis, Edits]] = []
        declined: list[str] = []
        for method in analysis.methods:
            live = [f for f in self.live(method, analysis) if f.code in FIXABLE_CODES]
            if not live or method.qualname in skip:
                continue
            plan = fixer.plan(method, live)
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

    def _reanalyze(self, analysis: FileAnalysis, new_text: str) -> Union[FileAnalysis, FileError]:
        source = analysis.source
        candidate = Candidate(analysis.path or Path(source.display), source.display, True)
        reloaded = load(candidate, encode(new_text, source.bom, source.encoding))
        if isinstance(reloaded, FileError):
            return FileError(source.display, "fixed text does not parse")
        names = {(m.site.class_qualname, m.site.method) for m in analysis.methods}
        sites = [s for s in find_methods(reloaded.tree, frozenset(n for _, n in names))
                 if (s.class_qualname, s.method) in names]
        return analyze(reloaded, sites, self.config, analysis.path, self.linter.class_pools)

    def _still_failing(self, again: FileAnalysis, fixed: set[str]) -> dict[str, list[str]]:
        failed: dict[str, list[str]] = {}
        for method in again.methods:
            if method.qualname not in fixed:
                continue
            codes = sorted({f.code for f in self.live(method, again)
                            if f.code in FIXABLE_CODES and level_of(f.code) == ERROR})
            if codes:
                failed[method.qualname] = codes
        return failed

    def _commit_fix(self, analysis: FileAnalysis, new_text: str, again: FileAnalysis,
                    notes: list[str]) -> FileAnalysis:
        source = analysis.source
        if not self.linter.write:
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

    def mark_fixable(self, findings: list[Finding]) -> list[Finding]:
        """A finding is fixable when its fix is planned and its method's fix survives the re-lint
        (each file's fixes planned and re-linted once, as `--fix` would)."""
        owners: dict[tuple[str, Optional[str]], tuple[MethodAnalysis, FileAnalysis]] = {
            (m.path, m.qualname): (m, a) for a in self.analyses for m in a.methods}
        fixers: dict[int, tuple[Fixer, set[str]]] = {}
        out: list[Finding] = []
        for finding in findings:
            owner = owners.get((finding.path, finding.method))
            if finding.code in FIXABLE_CODES and owner is not None:
                method, analysis = owner
                if id(analysis) not in fixers:
                    fixer = self._fixer_for(analysis)
                    got = self._fixed(analysis, fixer, record=False)
                    fixers[id(analysis)] = fixer, (got[3] if got else set())
                fixer, survivors = fixers[id(analysis)]
                plan = fixer.plan_one(method, finding)
                if isinstance(plan, Edits) and not plan.empty() and method.qualname in survivors:
                    finding = replace(finding, fixable=True)
            out.append(finding)
        return out


__all__ = ["Edits", "FixRun", "Fixer", "Plan", "fix_text"]
