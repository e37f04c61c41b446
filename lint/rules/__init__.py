"""The rule registry: the one place that lists the rules. Every other part
(the CLI, suppressions, fixes, reports, configuration) asks it. Codes are
stable; see lint/README.md."""

from __future__ import annotations

from lint.rules.base import ERROR, INFO, WARNING, GroupRule, Invalid, MethodRule, NoteRule, Rule, SuppressionRule, Valid
from lint.rules.drift import AlignmentDrift
from lint.rules.guard_key import GuardKey
from lint.rules.guard_missing import GuardMissing
from lint.rules.guard_placement import GuardPlacement
from lint.rules.guard_upstream import VoteForcingGuard
from lint.rules.pools_unseen import PoolsUnseen
from lint.rules.sidecar_commit import SidecarCommitGuard
from lint.rules.suppressions import InvalidSuppression, UnusedSuppression

ALL_RULES: tuple[type[Rule], ...] = (
    GuardMissing,
    GuardKey,
    GuardPlacement,
    AlignmentDrift,
    UnusedSuppression,
    InvalidSuppression,
    VoteForcingGuard,
    SidecarCommitGuard,
    PoolsUnseen,
)
RULES_BY_CODE = {rule.code: rule for rule in ALL_RULES}
RULES_BY_NAME = {rule.name: rule for rule in ALL_RULES}
FIXABLE_CODES = frozenset(rule.code for rule in ALL_RULES if rule.fixable)
SUPPRESSIBLE_CODES = tuple(rule.code for rule in ALL_RULES if rule.suppressible)


def level_of(code: str) -> str:
    return RULES_BY_CODE[code].level


__all__ = [
    "ALL_RULES",
    "ERROR",
    "INFO",
    "FIXABLE_CODES",
    "RULES_BY_CODE",
    "RULES_BY_NAME",
    "SUPPRESSIBLE_CODES",
    "WARNING",
    "GroupRule",
    "Invalid",
    "MethodRule",
    "NoteRule",
    "Rule",
    "SuppressionRule",
    "Valid",
    "level_of",
]
