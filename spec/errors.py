"""The one error type for bad configuration, shared by every package.

A ConfigError renders as a single line naming the field, the value given and
what is accepted, so a CLI or a test can show it without a traceback.
"""

from __future__ import annotations

from typing import Any


class ConfigError(ValueError):
    """A configuration field holds a value the spec does not accept."""

    def __init__(self, field: str, value: Any, accepted: str) -> None:
        self.field = field
        self.value = value
        self.accepted = accepted
        super().__init__(f"invalid {field}: {value!r} (accepted: {accepted})")
