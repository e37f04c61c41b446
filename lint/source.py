"""Finding files, reading them, the text prefilter and decoding."""

from __future__ import annotations

import ast
import errno
import io
import os
import tokenize
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Iterable, Optional, Union

from lint.findings import FileError
from lint.ignore import Ignores

SKIP_DIRS = {"__pycache__", "node_modules"}
# named as Python source (pre-commit's `types: [python]` passes .py, .pyw and python `#!` scripts)
PYTHON_SUFFIXES = (".py", ".pyw", ".pyi")
NO_PYTHON_FILE = ("no Python file in this directory (excluded and git-ignored ones left out); "
                  "expected a directory holding *.py files, or pass --allow-empty")
NOT_PYTHON = ("not a Python file; expected a .py file (or *.py.txt), a script whose #! line names python, "
              "or a directory")


@dataclass(frozen=True)
class Candidate:
    path: Path
    display: str
    explicit: bool  # named on the command line (or in the configuration)


@dataclass
class SourceFile:
    path: Path
    display: str
    text: str
    lines: list[str]
    tree: ast.Module
    bom: bool
    encoding: str


def display_path(path: Path) -> str:
    """Relative to the cwd when the file is under it, else as given.

    Symbolic links are not followed: a link is shown under its own name.
    """
    try:
        absolute = os.path.abspath(path)
        relative = os.path.relpath(absolute, os.path.abspath(os.getcwd()))
    except (ValueError, OSError):
        return str(path)
    return str(path) if relative == ".." or relative.startswith(".." + os.sep) else relative


def relative_posix(path: str, folder: Union[str, Path]) -> str:
    """`path` relative to `folder`, '/'-separated (as given on another drive)."""
    try:
        return PurePath(os.path.relpath(os.path.abspath(path), folder)).as_posix()
    except ValueError:  # another drive
        return PurePath(path).as_posix()


def link_problem(path: Path) -> Optional[str]:
    """Why a symbolic link cannot be followed (a loop, a missing target), else None."""
    if not path.is_symlink():
        return None
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "symbolic link loop; expected a file or directory"
        target = os.readlink(path)
        return f"dangling symbolic link to {target!r}; expected a file or directory"
    return None


def _walk(folder: Path, ignores: Optional[Ignores], found: list[Candidate], errors: list[FileError]) -> None:
    for root, dirs, files in os.walk(folder):
        absolute = os.path.abspath(root)
        if ignores is not None:
            ignores.enter(absolute)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS
                         and not (ignores and ignores.excluded(os.path.join(absolute, d), True)))
        for name in sorted(files):
            if not name.endswith(".py") or (ignores and ignores.excluded(os.path.join(absolute, name), False)):
                continue
            full = Path(root) / name
            problem = link_problem(full)
            if problem is not None:
                errors.append(FileError(display_path(full), problem))
            else:
                found.append(Candidate(full, display_path(full), False))


def discover(paths: Iterable[str], ignores: Optional[Ignores] = None,
             allow_empty: bool = True) -> tuple[list[Candidate], list[FileError]]:
    """Expand paths: files as given (never excluded, as ruff), directories recursed for
    *.py without what `ignores` leaves out (links not followed into folders).
    allow_empty=False: a directory that holds no Python file to lint is an error."""
    found: list[Candidate] = []
    errors: list[FileError] = []
    for raw in paths:
        path = Path(raw)
        problem = link_problem(path)
        if problem is not None:
            errors.append(FileError(display_path(path), problem))
        elif path.is_dir():
            before = len(found), len(errors)
            _walk(path, ignores, found, errors)
            if not allow_empty and (len(found), len(errors)) == before:
                errors.append(FileError(display_path(path), NO_PYTHON_FILE))
        elif path.is_file():
            found.append(Candidate(path, display_path(path), True))
        elif path.exists():
            errors.append(FileError(display_path(path), "not a regular file or directory"))
        else:
            errors.append(FileError(display_path(path), "no such file or directory"))
    return found, errors


def decode(data: bytes, display: str) -> Union[tuple[str, bool, str], FileError]:
    """(text, had_bom, encoding) or the reason the bytes are not source text."""
    nul = data.find(b"\0")
    if nul >= 0:
        return FileError(display, f"binary file (NUL byte at offset {nul}); expected Python source")
    bom = data.startswith(b"\xef\xbb\xbf")
    try:
        return data.decode("utf-8-sig"), bom, "utf-8"
    except UnicodeDecodeError as exc:
        utf8_error = exc
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError:
        encoding = "utf-8"
    if encoding.lower().replace("_", "-") not in ("utf-8", "utf-8-sig"):
        try:
            return data.decode(encoding), False, encoding
        except (UnicodeDecodeError, LookupError):
            pass
    bad = data[utf8_error.start]
    return FileError(
        display,
        f"not valid UTF-8 (byte 0x{bad:02x} at offset {utf8_error.start}); "
        f"expected UTF-8 Python source",
    )


def load(candidate: Candidate, data: bytes) -> Union[SourceFile, FileError]:
    decoded = decode(data, candidate.display)
    if isinstance(decoded, FileError):
        return decoded
    text, bom, encoding = decoded
    try:
        tree = ast.parse(text, filename=candidate.display)
    except SyntaxError as exc:
        where = f"line {exc.lineno}" + (f", column {exc.offset}" if exc.offset else "")
        return FileError(candidate.display, f"syntax error at {where}: {exc.msg}")
    except (ValueError, RecursionError) as exc:
        return FileError(candidate.display, f"cannot parse: {exc}")
    return SourceFile(candidate.path, candidate.display, text, text.splitlines(keepends=True),
                      tree, bom, encoding)


def read(candidate: Candidate) -> Union[bytes, FileError]:
    try:
        return candidate.path.read_bytes()
    except OSError as exc:
        return FileError(candidate.display, f"cannot read: {exc.strerror or exc}")


def encode(text: str, bom: bool, encoding: str) -> bytes:
    data = text.encode(encoding)
    return b"\xef\xbb\xbf" + data if bom else data


def named_python(path: Path, data: bytes) -> bool:
    """Python source by its name (`*.py`, or Python kept as `*.py.txt`) or its `#!` line."""
    if path.suffix in PYTHON_SUFFIXES or ".py" in path.suffixes:
        return True
    first = data[:256].split(b"\n", 1)[0]
    return first.startswith(b"#!") and b"python" in first


def explicit_problem(candidate: Candidate, data: bytes) -> Optional[FileError]:
    """Problems reported only for files named explicitly: empty, not text, or not Python (a README
    named by mistake, say)."""
    if not data.strip():
        return FileError(candidate.display, "file is empty; expected Python source")
    decoded = decode(data, candidate.display)
    if isinstance(decoded, FileError):
        return decoded
    return None if named_python(candidate.path, data) else FileError(candidate.display, NOT_PYTHON)
