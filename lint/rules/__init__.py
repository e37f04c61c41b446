"""Rule registry. Codes are stable; see lint/README.md."""

from __future__ import annotations

from lint.rules.base import GroupRule, Invalid, MethodRule, Rule, SuppressionRule
from lint.rules.drift import AlignmentDrift
from lint.rules.guard_key import GuardKey
from lint.rules.guard_missing import GuardMissing
from lint.rules.guard_placement import GuardPlacement
from lint.rules.suppressions import InvalidSuppression, UnusedSuppression

ALL_RULES: tuple[type[Rule], ...] = (
    GuardMissing,
    GuardKey,
    GuardPlacement,
    AlignmentDrift,
    UnusedSuppression,
    InvalidSuppression,
)
RULES_BY_CODE = {rule.code: rule for rule in ALL_RULES}
RULES_BY_NAME = {rule.name: rule for rule in ALL_RULES}

__all__ = [
    "ALL_RULES",
    "RULES_BY_CODE",
    "RULES_BY_NAME",
    "GroupRule",
    "Invalid",
    "MethodRule",
    "Rule",
    "SuppressionRule",
]
