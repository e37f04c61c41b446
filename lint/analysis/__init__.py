"""Normalized analysis of one `can_terminate_prefetch`-style method.

The analysis runs as a chain of small passes, each with explicit inputs and
outputs (see each module's docstring):

    body    (statements, branches, policies)      -> Body
    roles   (operation, terminated, done aliases)  -> partial Roles
    reduce  (the cross-rank collective)            -> ReduceSite
    roles   (vote, completion predicates)          -> Roles
    guard   (guards and their placement problems)  -> list[Guard]
    guard   (reads named like the done flag)       -> (name, line) pairs
    shape   (policies, combine, timeout cap)       -> features

Rules read the result; they never look at raw syntax themselves.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional, Sequence

from lint.analysis import roles as roles_pass
from lint.analysis import shape
from lint.analysis.body import Body, StmtRec, walk_body
from lint.analysis.commit import CommitPath
from lint.analysis.guard import Guard, best_guard, find_guards, find_inert_checks, find_lookalikes
from lint.analysis.reduce import ReduceSite, find_reduce, parse_reduce_calls
from lint.analysis.roles import Roles
from lint.analysis.shape import Feature
from lint.config import Implementation
from lint.findings import Finding
from lint.locate import ClassIndex, MethodSite
from lint.pools import Evidence
from lint.protocol import DONE, FEATURE_NAMES
from lint.unit import ParsedMethod

__all__ = ["FEATURE_NAMES", "Feature", "Guard", "MethodAnalysis", "ReduceSite", "Roles", "StmtRec",
           "analyze_method"]


@dataclass
class MethodAnalysis:
    """Everything the rules need to know about one termination method."""

    parsed: Optional[ParsedMethod]  # None once released (findings computed, no fix to plan)
    site: MethodSite
    def_line: int
    path: str
    lines: list[str]
    skip_reason: Optional[str]
    body: Body
    roles: Roles
    reduce: Optional[ReduceSite]
    guards: list[Guard]
    guard: Optional[Guard]
    inert_checks: list[int]  # lines of done checks that force nothing to no
    policies: dict[str, int]
    features: dict[str, Feature]
    # (name, line) of reads named like the done flag that are not it (`pool_transfers_finished`)
    lookalikes: tuple[tuple[str, int], ...] = ()
    # the configured implementation this method is, set by the linter
    implementation: Optional[Implementation] = None
    # its commit path, when the configuration puts the check there
    commit: Optional[CommitPath] = None
    # the line that brings extra-pool transfers into its class (None: nothing does)
    pools: Optional[Evidence] = None
    # its own rules' findings, kept when the syntax trees are released
    findings: Optional[list[Finding]] = None

    @property
    def guard_in_decision(self) -> bool:
        """False when the configuration puts the check in the commit path instead."""
        return self.implementation is None or self.implementation.guard == "decision"

    @property
    def fenced(self) -> bool:
        """Configured `fenced = true`: a fix may write the spec's form of the guard (see Implementation)."""
        return self.implementation is not None and self.implementation.fenced

    @property
    def qualname(self) -> str:
        return self.site.qualname

    def release(self) -> None:
        """Drop the syntax trees (the rules have run): a long run keeps one file's trees at a time."""
        self.parsed = None
        self.body = None  # type: ignore[assignment]
        self.reduce = None
        self.guards, self.guard = [], None
        self.site = replace(self.site, index=ClassIndex())  # the class's stdlib tree goes too

    @property
    def def_col(self) -> int:
        return self.column_of_line(self.def_line)

    @property
    def flag(self) -> str:
        """The completion flag's configured name."""
        return self.roles.flag

    @property
    def op_param(self) -> Optional[str]:
        return self.roles.op_param

    @property
    def vote(self) -> Optional[str]:
        return self.roles.vote

    @property
    def predicates(self) -> frozenset[str]:
        return self.roles.predicates

    def column_of_line(self, line: int) -> int:
        """1-based column of the first non-blank character on a file line."""
        if 1 <= line <= len(self.lines):
            text = self.lines[line - 1]
            return len(text) - len(text.lstrip()) + 1
        return 1


def analyze_method(parsed: ParsedMethod, path: str, reduce_calls: Sequence[str],
                   lines: Optional[list[str]] = None, flag: str = DONE) -> MethodAnalysis:
    func = parsed.func
    def_line = parsed.line(func.name)
    body = walk_body(parsed)
    op_param = roles_pass.op_param(func)
    terminated = roles_pass.find_terminated(body)
    calls = parse_reduce_calls(reduce_calls)

    vote = roles_pass.vote_from_return(func, terminated)
    if vote is not None and roles_pass.binds_completion(body, vote):
        vote = None  # the method returns its completion predicate directly
    reduce = find_reduce(parsed, body, calls, {vote, terminated})
    if vote is None:
        vote = roles_pass.vote_fallback(body, reduce.elements if reduce else None)
        if vote is not None:
            reduce = find_reduce(parsed, body, calls, {vote, terminated})

    excluded = {vote, terminated, op_param, "self"}
    if reduce is not None:
        excluded |= set(reduce.slot_names) | reduce.slot_containers
    roles = Roles(op_param, terminated, vote, roles_pass.find_predicates(body, excluded),
                  roles_pass.find_done_aliases(body, flag), flag)

    guards = find_guards(parsed, body, roles, reduce)
    guard = best_guard(guards)
    policies = shape.find_policies(body)
    kinds = shape.payload(reduce, roles)
    feats = shape.features(
        def_line, policies, guard, shape.find_combine(body, roles, reduce, kinds, def_line), reduce,
        kinds, shape.find_timeout_cap(body, parsed.site.index, def_line))
    return MethodAnalysis(parsed, parsed.site, def_line, path, lines or [],
                          roles_pass.skip_reason(func, parsed.site.method),
                          body, roles, reduce, guards, guard, find_inert_checks(body, roles, guards),
                          policies, feats, find_lookalikes(parsed, body, flag))
