"""Autofix: plans per method (lint/fix/guards.py), spelled from evidence
(lint/fix/spelling.py), applied as libcst edits (lint/fix/edits.py).

Re-running finds nothing left to fix; the linter re-lints every fixed file
and keeps a method's fix only if it leaves no error behind.
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from lint.analysis import MethodAnalysis
from lint.config import Config
from lint.findings import Finding
from lint.fix.edits import Edits, apply, splice
from lint.fix.guards import GuardFixer, Plan
from lint.fix.spelling import Evidence

INSERT_CODES = ("HC101",)
REWORK_CODES = ("HC102", "HC103", "HC107")


class Fixer:
    """Plans fixes for findings, one method at a time."""

    def __init__(self, config: Config, evidence: Evidence) -> None:
        self.config = config
        self.evidence = evidence
        self._plans: dict[tuple[int, str, int], Plan] = {}

    def _fenced(self, method: MethodAnalysis, path) -> bool:
        impl = self.config.implementation_for(path, method.site.class_qualname)
        return impl is not None and impl.fenced

    def plan_one(self, method: MethodAnalysis, finding: Finding, path) -> Plan:
        key = (id(method), finding.code, finding.line)
        if key not in self._plans:
            fixer = GuardFixer(method, self._fenced(method, path), self.evidence)
            if finding.code in INSERT_CODES:
                plan = fixer.insert()
            else:
                guard = next((g for g in method.guards if g.line == finding.line), method.guard)
                plan = fixer.rework(guard, finding.code) if guard is not None else "no guard to fix"
            self._plans[key] = plan
        return self._plans[key]

    def plan(self, method: MethodAnalysis, findings: list[Finding], path) -> Optional[Plan]:
        """The first fix among this method's findings (one per pass keeps edits apart)."""
        # upstream's form in an implementation without the fence is left as it is, by design
        wanted = [f for f in findings if f.code in INSERT_CODES + REWORK_CODES
                  and (f.code != "HC107" or self._fenced(method, path))]
        ordered = sorted(wanted, key=lambda f: ((INSERT_CODES + REWORK_CODES).index(f.code), f.line))
        reason: Optional[str] = None
        for finding in ordered:
            plan = self.plan_one(method, finding, path)
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


__all__ = ["Edits", "Fixer", "Plan", "fix_text"]
