"""Result records shared by rules, the API and the reporters."""

from __future__ import annotations

from dataclasses import dataclass
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

    def sort_key(self) -> tuple:
        return (self.path, self.line, self.col, self.code, self.message)

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.col}: {self.code} {self.message}"


@dataclass(frozen=True)
class FileError:
    """A file (or the configuration) that could not be linted."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: error: {self.message}"
