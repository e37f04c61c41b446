"""Adopting the linter on a code base that already has findings: a baseline,
excludes and .gitignore, noqa, the command line's rule selection, per-file
ignores, the summary line, and a run that checks nothing saying so."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from lint.rules.base import POOLED_TAIL

UPSTREAM = Path(__file__).resolve().parent / "samples" / "upstream"
GUARD = ('        if (\n            completed\n            and getattr(operation, "pool_transfers", None)\n'
         '            and not getattr(operation, "pool_transfers_done", True)\n        ):\n'
         '            can_terminate = False\n')

UNGUARDED = (
    "class Cache:\n"
    "    def can_terminate_prefetch(self, op):{noqa}\n"
    "        completed = op.completed_tokens == len(op.hash_value) * self.page_size\n"
    "        return completed\n") + POOLED_TAIL


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """The three upstream-shaped classes after PR #27550: HC104 (an error) and three HC107 warnings."""
    (tmp_path / ".git").mkdir()
    caches = tmp_path / "caches"
    caches.mkdir()
    for name in ("hiradix_fixed", "unified_radix", "hi_mamba_radix"):
        shutil.copy(UPSTREAM / f"{name}.py.txt", caches / f"{name}.py")
    (tmp_path / "pyproject.toml").write_text('[tool.hicache-lint]\nbaseline = "lint-baseline.json"\n')
    return tmp_path


def codes(proc) -> list[str]:
    return [line.split()[1] for line in proc.stdout.splitlines()]


def test_a_baseline_lets_existing_findings_pass_and_blocks_new_ones(project, run_cli):
    missing = run_cli("caches", cwd=project)
    assert missing.returncode == 2 and "baseline file not found; create it with --write-baseline" in missing.errors
    written = run_cli("caches", "--write-baseline", "lint-baseline.json", cwd=project)
    assert written.returncode == 0 and "wrote 1 finding to the baseline lint-baseline.json" in written.stderr
    recorded = json.loads((project / "lint-baseline.json").read_text())
    assert [(e["code"], e["path"]) for e in recorded["findings"]] == [("HC104", "caches/unified_radix.py")]

    passing = run_cli("caches", cwd=project)
    assert passing.returncode == 0, passing.stdout + passing.stderr
    assert codes(passing) == ["HC107", "HC107", "HC107"]  # the warnings still show
    assert passing.summary == ("hicache-lint: 3 methods checked in 3 of 3 files: 0 errors, 3 warnings, 0 notes; "
                               "1 more in the baseline")
    # lines moving above a baselined finding do not make it new
    unified = project / "caches" / "unified_radix.py"
    unified.write_text("# a comment\n# and another\n" + unified.read_text())
    assert run_cli("caches", cwd=project).returncode == 0
    # a removed guard is new
    hiradix = project / "caches" / "hiradix_fixed.py"
    hiradix.write_text(hiradix.read_text().replace(GUARD, ""))
    blocked = run_cli("caches", cwd=project)
    assert blocked.returncode == 1 and "HC101" in codes(blocked), blocked.stdout
    assert "HC104" not in codes(blocked)


def test_a_bad_baseline_is_one_error_line(project, run_cli):
    (project / "lint-baseline.json").write_text('{"version": 7}')
    proc = run_cli("caches", cwd=project)
    assert proc.returncode == 2
    assert proc.errors.splitlines() == [
        f"{project / 'lint-baseline.json'}: error: not a hicache-lint baseline (expected version 1 with a "
        "findings list of fingerprints); write one with --write-baseline"], proc.errors
    assert "Traceback" not in proc.stderr


def test_default_excludes_and_gitignore_are_honoured_in_directory_runs(tmp_path, run_cli):
    (tmp_path / ".git").mkdir()
    for folder in ("venv/lib", "build/lib", "src", "src/generated", "node"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "cache.py").write_text(UNGUARDED.format(noqa=""))
    (tmp_path / ".gitignore").write_text("generated/\nnode/*\n!node/cache.py\n")
    proc = run_cli(".", cwd=tmp_path)
    assert sorted(line.split(":")[0] for line in proc.stdout.splitlines()) == ["node/cache.py", "src/cache.py"]
    # a file named on the command line is linted wherever it is (as ruff does)
    assert codes(run_cli("venv/lib/cache.py", cwd=tmp_path)) == ["HC101"]
    # extend-exclude adds a glob; respect-gitignore = false reads ignored files again
    (tmp_path / "pyproject.toml").write_text('[tool.hicache-lint]\nextend-exclude = ["node"]\n'
                                             'respect-gitignore = false\n')
    proc = run_cli(".", cwd=tmp_path)
    assert sorted(line.split(":")[0] for line in proc.stdout.splitlines()) == ["src/cache.py",
                                                                                "src/generated/cache.py"]


def test_noqa_with_our_codes_and_a_reason_silences_that_line(tmp_path, run_cli):
    for name, noqa, expected in (
            ("ours.py", "  # noqa: HC101 reason: a test double, its pool reads are synchronous", []),
            ("mixed.py", "  # noqa: E501, HC101 reason: a test double", []),
            ("bare.py", "  # noqa", ["HC101"]),  # a blanket noqa from another tool silences none of ours
            ("other.py", "  # noqa: HC104 reason: stale", ["HC101", "HC105"]),  # nothing to silence: unused
            ("unknown.py", "  # noqa: HC105", ["HC101", "HC106"])):  # not suppressible
        (tmp_path / name).write_text(UNGUARDED.format(noqa=noqa))
        assert sorted(codes(run_cli(name, cwd=tmp_path))) == expected, name


@pytest.mark.parametrize("noqa", ["  # noqa: HC101", "  # noqa: E501, HC101", "  # noqa: HC101 reason:"])
def test_noqa_without_a_reason_silences_nothing_and_says_so(tmp_path, run_cli, noqa):
    (tmp_path / "cache.py").write_text(UNGUARDED.format(noqa=noqa))
    proc = run_cli("cache.py", cwd=tmp_path)
    assert proc.returncode == 1 and codes(proc) == ["HC101", "HC106"]
    assert proc.stdout.splitlines()[1] == (
        f"cache.py:2:{UNGUARDED.format(noqa=noqa).splitlines()[1].index('#') + 1}: HC106 [error] noqa for HC101 "
        "gives no reason, so it silences nothing; add 'reason: <why>' after its codes: "
        "'# noqa: HC101 reason: <why>'")


def test_select_ignore_and_per_file_ignores(tmp_path, run_cli):
    (tmp_path / "tests").mkdir()
    for path in ("cache.py", "tests/double.py"):
        (tmp_path / path).write_text(UNGUARDED.format(noqa=""))
    assert codes(run_cli("cache.py", "--ignore", "HC101", cwd=tmp_path)) == []
    assert codes(run_cli("cache.py", "--select", "HC102,HC103", cwd=tmp_path)) == []
    assert codes(run_cli("cache.py", "--select", "HC102", "--extend-select", "guard-missing", cwd=tmp_path)) == ["HC101"]
    bad = run_cli("cache.py", "--select", "HC9", cwd=tmp_path)
    assert bad.returncode == 2 and bad.errors.startswith("hicache-lint: error: --select: unknown rule 'HC9'")
    (tmp_path / "pyproject.toml").write_text('[tool.hicache-lint]\nper-file-ignores = {"tests/" = ["HC1"]}\n')
    proc = run_cli("cache.py", "tests/double.py", cwd=tmp_path)
    assert [line.split(":")[0] for line in proc.stdout.splitlines()] == ["cache.py"]


def test_the_summary_counts_files_methods_and_findings_by_level(project, run_cli):
    (project / "pyproject.toml").unlink()
    (project / "caches" / "notes.py").write_text("x = 1\n")
    proc = run_cli("caches", cwd=project)
    assert proc.summary == "hicache-lint: 3 methods checked in 3 of 4 files: 1 error, 3 warnings, 0 notes"
    assert run_cli("-q", "caches", cwd=project).summary == ""
    assert run_cli("--format", "json", "caches", cwd=project).summary == ""  # the document carries it


def test_a_run_that_checks_nothing_says_so(tmp_path, run_cli):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "conf.txt").write_text("not python\n")
    proc = run_cli("docs", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.errors.splitlines() == [
"docs: error: no Python file in this directory (excluded and git-ignored ones left out); "
        "expected a directory holding *.py files, or pass --allow-empty"]
    assert run_cli("docs", "--allow-empty", cwd=tmp_path).returncode == 0
    # files named one by one, as pre-commit passes them, may hold no candidate: quiet
    (tmp_path / "util.py").write_text("def f():\n    return 1\n")
    proc = run_cli("util.py", cwd=tmp_path)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
