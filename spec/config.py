"""Termination configuration: the policy and the timeout parameters.

Validated at construction. Upstream silently votes "yes" for an unknown
policy string; the spec rejects it where it is configured instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from enum import Enum
from typing import Any, Mapping

from spec.errors import ConfigError

DEFAULT_TIMEOUT_BASE_S = 2.0
DEFAULT_TIMEOUT_PER_KI_TOKEN_S = 0.1
DEFAULT_TIMEOUT_MAX_S = 30.0


class Policy(str, Enum):
    """When the scheduler may stop waiting for an in-flight prefetch."""

    BEST_EFFORT = "best_effort"
    WAIT_COMPLETE = "wait_complete"
    TIMEOUT = "timeout"

    @classmethod
    def parse(cls, value: Any, field: str = "policy") -> "Policy":
        if isinstance(value, cls):
            return value
        for policy in cls:
            if value == policy.value:
                return policy
        raise ConfigError(field, value, "one of " + ", ".join(repr(p.value) for p in cls))

    @property
    def uses_collective(self) -> bool:
        """best_effort decides locally; the others vote across ranks."""
        return self is not Policy.BEST_EFFORT

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class TerminationConfig:
    """Everything the decision and the timeout depend on besides the operation."""

    policy: Policy = Policy.BEST_EFFORT
    page_size: int = 1
    timeout_base_s: float = DEFAULT_TIMEOUT_BASE_S
    timeout_per_ki_token_s: float = DEFAULT_TIMEOUT_PER_KI_TOKEN_S
    timeout_max_s: float = DEFAULT_TIMEOUT_MAX_S

    def __post_init__(self) -> None:
        object.__setattr__(self, "policy", Policy.parse(self.policy))
        require_positive_int("page_size", self.page_size)
        _require_number("timeout_base_s", self.timeout_base_s, minimum_exclusive=0.0)
        _require_number("timeout_per_ki_token_s", self.timeout_per_ki_token_s, minimum_inclusive=0.0)
        _require_number("timeout_max_s", self.timeout_max_s, minimum_exclusive=0.0)
        if self.timeout_max_s < self.timeout_base_s:
            raise ConfigError(
                "timeout_max_s",
                self.timeout_max_s,
                f"a finite number >= timeout_base_s ({self.timeout_base_s!r})",
            )

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> "TerminationConfig":
        """Build from user input (a TOML table, CLI options); unknown keys are errors."""
        return from_known_fields(cls, values)


def from_known_fields(cls: Any, values: Mapping[str, Any]) -> Any:
    """Build dataclass `cls` from user input, rejecting fields it does not have."""
    known = [f.name for f in fields(cls)]
    for key, value in values.items():
        if key not in known:
            raise ConfigError(key, value, "a known field: " + ", ".join(known))
    return cls(**dict(values))


def require_positive_int(field: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(field, value, "an integer > 0")
    return value


def _require_number(
    field: str,
    value: Any,
    *,
    minimum_exclusive: float | None = None,
    minimum_inclusive: float | None = None,
) -> None:
    is_number = not isinstance(value, bool) and isinstance(value, (int, float))
    if minimum_exclusive is not None:
        ok = is_number and math.isfinite(value) and value > minimum_exclusive
        accepted = f"a finite number > {minimum_exclusive:g}"
    else:
        assert minimum_inclusive is not None
        ok = is_number and math.isfinite(value) and value >= minimum_inclusive
        accepted = f"a finite number >= {minimum_inclusive:g}"
    if not ok:
        raise ConfigError(field, value, accepted)
