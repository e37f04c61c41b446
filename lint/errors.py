"""The linter's error root: every exception lint/ defines derives from LintError,
so a caller catches whatever the linter raises on purpose with one except clause."""

from __future__ import annotations


class LintError(Exception):
    """Raised on purpose by the linter."""


class LintConfigError(LintError, ValueError):
    """Invalid configuration; the message names the field, the value and what is accepted."""

    def __init__(self, source: str, message: str) -> None:
        super().__init__(f"{source}: error: {message}")
        self.source = source
        self.message = message
