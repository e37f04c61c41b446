"""`python -m lint.history GIT_DIR`: the linter replayed on every commit of a repository's history.

For each commit (newest first) that touches the implementation files, the
folders they read from are taken out of the git directory as that commit
had them (`git archive`, nothing checked out), the files present are linted
together with the default configuration, and the findings of the chosen
rules are listed per class. This is how a rule is shown precise on code
nobody here wrote: it should fire exactly where the guard was owed and
missing (on SGLang's fork: HiRadixCache from 736263f3d until PR #27550, and
HiMambaRadixCache before its own guard), and nowhere else.
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from lint.api import lint_paths
from lint.errors import LintError

MEM_CACHE = "python/sglang/srt/mem_cache"
# SGLang's layout: the three implementations, and the folders whose files the
# linter reads to see extra pools and their completion flag (the controllers).
DEFAULT_FILES = (f"{MEM_CACHE}/hiradix_cache.py", f"{MEM_CACHE}/unified_radix_cache.py", f"{MEM_CACHE}/hi_mamba_radix_cache.py")
DEFAULT_READ = (MEM_CACHE, "python/sglang/srt/managers")
DEFAULT_CODES = ("HC101", "HC102", "HC103")
GIT_TIMEOUT_S = 120


class UsageError(LintError):
    """One line for the user: what was wrong with the input."""


def _git(git_dir: Path, *args: str) -> bytes:
    try:
        proc = subprocess.run(["git", f"--git-dir={git_dir}", *args], capture_output=True, timeout=GIT_TIMEOUT_S)
    except FileNotFoundError:
        raise UsageError("git: not found on PATH (accepted: a git executable)") from None
    except subprocess.TimeoutExpired:
        raise UsageError(f"git {' '.join(args[:2])}: no answer within {GIT_TIMEOUT_S} s") from None
    if proc.returncode != 0:
        said = proc.stderr.decode(errors="replace").strip().splitlines()
        raise UsageError(f"git {' '.join(args[:2])}: {said[-1] if said else 'failed'}")
    return proc.stdout


def commits_touching(git_dir: Path, rev: str, files: Sequence[str]) -> list[str]:
    return _git(git_dir, "rev-list", rev, "--", *files).decode().split()


def extract(git_dir: Path, commit: str, folders: Sequence[str], into: Path) -> None:
    """The folders as `commit` had them; a folder the commit lacks is simply absent."""
    present = _git(git_dir, "ls-tree", "--name-only", commit, *folders).decode().split()
    if not present:
        return
    archive = _git(git_dir, "archive", "--format=tar", commit, *present)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        try:
            tar.extractall(into, filter="data")
        except TypeError:  # Python before 3.10.12 / 3.11.4 has no filters; git's own archive holds plain files
            tar.extractall(into)


@dataclass
class CommitFindings:
    commit: str
    classes: dict[str, set[str]] = field(default_factory=dict)  # class -> the counted codes it got
    unreadable: list[str] = field(default_factory=list)  # "file: why" for each file the linter could not read

    def lines(self) -> list[str]:
        return ([f"{self.commit[:9]} {name}: {', '.join(sorted(codes))}" for name, codes in sorted(self.classes.items())]
                + [f"{self.commit[:9]} cannot lint {what}" for what in self.unreadable])


def replay(git_dir: Path, rev: str, files: Sequence[str], read: Sequence[str], codes: Sequence[str]) -> tuple[list[str], list[CommitFindings]]:
    """The commits replayed, and those with findings of `codes` or a file the linter could not read."""
    commits = commits_touching(git_dir, rev, files)
    found: list[CommitFindings] = []
    for commit in commits:
        with tempfile.TemporaryDirectory(prefix="hicache-lint-history-") as tmp:
            root = Path(tmp)
            (root / ".git").mkdir()  # the linter finds a checkout's root (and the files it reads along) by this marker
            extract(git_dir, commit, read, root)
            present = [str(root / f) for f in files if (root / f).is_file()]
            if not present:
                continue
            result = lint_paths(present)
        entry = CommitFindings(commit)
        for finding in result.findings:
            if finding.code in codes:
                entry.classes.setdefault((finding.method or "?").split(".")[0], set()).add(finding.code)
        # a commit the linter cannot read is reported, never skipped silently
        entry.unreadable = [f"{Path(error.path).name}: {error.message}" for error in result.errors]
        if entry.classes or entry.unreadable:
            found.append(entry)
    return commits, found


def _codes(text: str) -> tuple[str, ...]:
    codes = tuple(c.strip().upper() for c in text.split(",") if c.strip())
    bad = [c for c in codes if not (len(c) == 5 and c.startswith("HC") and c[2:].isdigit())]
    if bad or not codes:
        raise argparse.ArgumentTypeError(f"invalid --codes: {text!r} (accepted: rule codes separated by commas, e.g. HC101,HC102)")
    return codes


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lint.history", description=__doc__.splitlines()[0])
    parser.add_argument("git_dir", type=Path, help="a git directory (a bare clone, or a checkout's .git)")
    parser.add_argument("--rev", default="HEAD", help="the history to replay: a commit and its ancestors, or a range A..B (default HEAD; --rev=--all: every branch)")
    parser.add_argument("--file", dest="files", action="append", help=f"an implementation file, repeatable (default: SGLang's three, {MEM_CACHE}/...)")
    parser.add_argument("--read", action="append", help="a folder the linter reads along, repeatable (default: mem_cache/ and managers/)")
    parser.add_argument("--codes", type=_codes, default=DEFAULT_CODES, help="the rules counted (default HC101,HC102,HC103: the guard rules)")
    args = parser.parse_args(argv)
    files = tuple(args.files or DEFAULT_FILES)
    read = tuple(args.read or DEFAULT_READ)
    try:
        if not args.git_dir.is_dir():
            raise UsageError(f"invalid git_dir: {str(args.git_dir)!r} (accepted: a git directory)")
        commits, found = replay(args.git_dir, args.rev, files, read, args.codes)
    except UsageError as exc:
        print(f"python -m lint.history: {exc}", file=sys.stderr)
        return 2
    for entry in found:
        print("\n".join(entry.lines()))
    flagged = [entry for entry in found if entry.classes]
    unreadable = sum(1 for entry in found if entry.unreadable)
    print(f"{len(commits)} commits replayed ({args.rev}, touching {len(files)} files): "
          f"{sum(len(entry.classes) for entry in flagged)} class-commits with {'/'.join(args.codes)}, at {len(flagged)} commits"
          + (f"; {unreadable} commits the linter cannot read" if unreadable else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
