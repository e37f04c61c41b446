"""Result records shared by rules, the API and the reporters."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import PurePath
from typing import Optional


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    col: int  # 1-based
    code: str
    message: str
    method: Optional[str] = None  # "Class.method" the finding belongs to
    method_line: Optional[int] = None  # def line of that method (suppression key)
    fixable: bool = False
    # the lines that make the rule apply (where the pools come in, where the flag is
    # defined); shown with the message, left out of the fingerprint: it may name other files
    evidence: str = ""

    @property
    def text(self) -> str:
        return f"{self.message} ({self.evidence})" if self.evidence else self.message

    def sort_key(self) -> tuple:
        return (self.path, self.line, self.col, self.code, self.message)

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.col}: {self.code} {self.text}"


@dataclass(frozen=True)
class FileError:
    """A file (or the configuration) that could not be linted."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: error: {self.message}"


def fingerprint(finding: Finding, path: Optional[str] = None) -> str:
    """Rule, file, method and message with numbers removed: stable when lines move.

    `path`: the file as the fingerprint names it (the baseline's are relative to
    the baseline file); the finding's own path by default."""
    message = re.sub(r"\d+", "#", finding.message)
    key = "\0".join((finding.code, PurePath(path or finding.path).as_posix(), finding.method or "", message))
    return hashlib.sha256(key.encode()).hexdigest()[:32]
