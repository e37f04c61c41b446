"""python -m lint.history: the linter replayed over a repository's commits, read from its git directory.

The history is hand-written in SGLang's layout (tests/lint/samples/), three
commits shaped like the fork's: a KV-only cache (nothing owed), extra pools
after KV with the completion flag and no guard (HC101: the race), then
PR #27550's guard (no guard finding; its HC107 warning is not counted).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from lint.history import main
from upstream_samples import CACHE, CONTROLLER, FIXED, KV_ONLY, PREFIX, SAMPLES

UNRELATED = Path("README.md")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          check=True, capture_output=True, text=True, timeout=60).stdout.strip()


def commit(repo: Path, files: dict[Path, str], message: str) -> str:
    for relative, text in files.items():
        (repo / relative).parent.mkdir(parents=True, exist_ok=True)
        (repo / relative).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def history(tmp_path: Path) -> tuple[Path, list[str]]:
    repo = tmp_path / "sglang"
    repo.mkdir()
    git(repo, "init", "-q")
    controller = (SAMPLES / "history" / "controller_pools_after_kv.py.txt").read_text()
    shas = [commit(repo, {CACHE: KV_ONLY, CONTROLLER: controller}, "kv only"),
            commit(repo, {CACHE: PREFIX}, "extra pools after kv, no guard"),
            commit(repo, {UNRELATED: "docs\n"}, "a commit that touches none of the files"),
            commit(repo, {CACHE: FIXED}, "the guard")]
    return repo / ".git", shas


def test_the_finding_is_listed_at_the_commit_that_owed_the_guard_only(tmp_path, capsys):
    git_dir, (kv_only, race, unrelated, fixed) = history(tmp_path)
    assert main([str(git_dir)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"{race[:9]} HiRadixCache: HC101",
                     "3 commits replayed (HEAD, touching 3 files): 1 class-commits with HC101/HC102/HC103, at 1 commits"]


def test_a_range_and_other_codes(tmp_path, capsys):
    git_dir, (kv_only, race, unrelated, fixed) = history(tmp_path)
    assert main([str(git_dir), "--rev", f"{race}..HEAD", "--codes", "HC107"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{fixed[:9]} HiRadixCache: HC107"  # upstream's guard form: the warning, at the fix
    assert lines[-1].startswith("1 commits replayed")


def test_bad_input_is_one_line(tmp_path, capsys):
    git_dir, _ = history(tmp_path)
    for argv, says in (([str(tmp_path / "none")], "invalid git_dir"), ([str(git_dir), "--rev", "nosuchrev"], "git rev-list nosuchrev:")):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and says in err, err


def test_a_commit_the_linter_cannot_read_is_said_not_skipped(tmp_path, capsys):
    git_dir, _ = history(tmp_path)
    broken = commit(git_dir.parent, {CACHE: FIXED + "\ndef broken(:\n"}, "a syntax error")
    assert main([str(git_dir)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"{broken[:9]} cannot lint hiradix_cache.py: syntax error at line"), lines
    assert lines[-1].endswith("1 class-commits with HC101/HC102/HC103, at 1 commits; 1 commits the linter cannot read")
