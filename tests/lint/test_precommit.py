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
    assert repo_wide["pass_filenames"] is False and repo_wide.get("always_run", False) is False
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


@pytest.mark.parametrize("staged, runs", [
    (["README.md", "docs/caches.md", ".github/workflows/ci.yml"], set()),  # a docs-only commit skips both
    (["README.md", "caches/hiradix.py"], {"hicache-lint-repo", "hicache-lint"}),
    (["python/pyproject.toml"], {"hicache-lint-repo"}),  # the configuration changed: re-check the implementations
])
def test_the_hooks_run_only_for_python_files(tmp_path, monkeypatch, staged, runs):
    """As pre-commit decides it: a hook runs when a staged file passes its filters, or when it always runs."""
    from types import SimpleNamespace

    clientlib = pytest.importorskip("pre_commit.clientlib", reason="pre-commit is not installed")
    run = pytest.importorskip("pre_commit.commands.run")
    monkeypatch.chdir(tmp_path)
    for name in staged:
        Path(name).parent.mkdir(parents=True, exist_ok=True)
        Path(name).write_text("x = 1\n")
    classifier = run.Classifier(staged)
    running = {hook["id"] for hook in clientlib.load_manifest(str(REPO / ".pre-commit-hooks.yaml"))
               if hook["always_run"] or list(classifier.filenames_for_hook(SimpleNamespace(**hook)))}
    assert running == runs


PRE_COMMIT = shutil.which("pre-commit", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))


@pytest.mark.skipif(PRE_COMMIT is None, reason="pre-commit is not installed")
def test_pre_commit_accepts_both_files():
    for command, name in (("validate-manifest", ".pre-commit-hooks.yaml"),
                          ("validate-config", ".pre-commit-config.yaml")):
        proc = subprocess.run([PRE_COMMIT, command, name], cwd=REPO, capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 0, proc.stdout + proc.stderr
