"""pre-commit hook definitions."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
yaml = pytest.importorskip("yaml", reason="pyyaml is needed to read the hook files (a test dependency)")


def test_published_hooks():
    hooks = {h["id"]: h for h in yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())}
    assert set(hooks) == {"hicache-lint-repo", "hicache-lint"}
    repo_wide = hooks["hicache-lint-repo"]
    assert repo_wide["entry"] == "hicache-lint --repo"
    assert repo_wide["pass_filenames"] is False and repo_wide["always_run"] is True
    # a passing hook still shows its warnings and summary: pre-commit prints output only when verbose
    assert repo_wide["verbose"] is True and hooks["hicache-lint"]["verbose"] is True
    per_file = hooks["hicache-lint"]
    assert per_file["entry"] == "hicache-lint --skip-empty"
    assert per_file["types"] == ["python"]
    assert per_file.get("pass_filenames", True) is True


def test_this_repositorys_config_runs_the_repo_wide_hook():
    config = yaml.safe_load((REPO / ".pre-commit-config.yaml").read_text())
    (local,) = config["repos"]
    assert local["repo"] == "local"
    (hook,) = local["hooks"]
    assert hook["entry"] == "python -m lint --repo"
    assert hook["pass_filenames"] is False and hook["always_run"] is True
    assert "caches/" in hook["files"]


PRE_COMMIT = shutil.which("pre-commit", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))


@pytest.mark.skipif(PRE_COMMIT is None, reason="pre-commit is not installed")
def test_pre_commit_accepts_both_files():
    for command, name in (("validate-manifest", ".pre-commit-hooks.yaml"),
                          ("validate-config", ".pre-commit-config.yaml")):
        proc = subprocess.run([PRE_COMMIT, command, name], cwd=REPO, capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 0, proc.stdout + proc.stderr
