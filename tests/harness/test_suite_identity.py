"""The suite's identity in a report: its commit, and whether what the suite runs had uncommitted changes."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from conformance.plugin.identity import SUITE_PACKAGES, git_state


def git(folder: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=folder, check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"})


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    for name in (*SUITE_PACKAGES, "lint"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "module.py").write_text("x = 1\n")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-q", "-m", "one")
    return tmp_path


@pytest.mark.parametrize("changed, modified", [("lint", False), ("spec", True), ("caches", True), ("conformance", True)])
def test_only_a_change_to_what_the_suite_runs_marks_it_modified(checkout, changed, modified):
    (checkout / changed / "module.py").write_text("x = 2\n")
    state = git_state(checkout / "conformance", only=SUITE_PACKAGES)
    assert state is not None and len(state["commit"]) == 40
    assert state["modified"] is modified
    assert git_state(checkout / "conformance")["modified"] is True  # the whole checkout, when not scoped
