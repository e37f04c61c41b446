"""Command line: exit codes, bad input, the text prefilter, entry points."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lint.api import lint_paths
from lint.cli import main
from lint.config import Config

from guardless_sample import GUARDLESS

REPO = Path(__file__).resolve().parents[2]



@pytest.fixture
def tree(tmp_path, samples) -> Path:
    shutil.copy(samples / "spellings.py.txt", tmp_path / "good.py")
    (tmp_path / "bad.py").write_text(GUARDLESS)
    return tmp_path


def test_exit_0_when_clean(tree, run_cli):
    proc = run_cli("good.py", cwd=tree)
    assert (proc.returncode, proc.stdout, proc.errors) == (0, "", "")


def test_exit_1_with_findings(tree, run_cli):
    proc = run_cli("good.py", "bad.py", cwd=tree)
    assert proc.returncode == 1
    assert proc.stdout.splitlines()[0].startswith("bad.py:2:5: HC101 [error] Cache.can_terminate_prefetch has no")
    assert proc.errors == ""


BAD_INPUTS = {
    "syntax.py": (b"class A:\n    def can_terminate_prefetch(self, op:\n",
                  "syntax.py: error: syntax error at line 2, column 31: '(' was never closed"),
    "latin1.py": (b"x = '\xe9'  # can_terminate_prefetch\n",
                  "latin1.py: error: not valid UTF-8 (byte 0xe9 at offset 5); expected UTF-8 Python source"),
    "empty.py": (b"", "empty.py: error: file is empty; expected Python source"),
    "blob.bin": (b"\x89PNG\r\n\x1a\n\x00\x00", "blob.bin: error: binary file (NUL byte at offset 8); "
                                                  "expected Python source"),
}


@pytest.mark.parametrize("name", list(BAD_INPUTS))
def test_bad_input_is_one_line_exit_2_and_other_files_still_linted(tree, run_cli, name):
    data, expected = BAD_INPUTS[name]
    (tree / name).write_bytes(data)
    proc = run_cli(name, "bad.py", cwd=tree)
    assert proc.returncode == 2
    assert proc.errors.splitlines() == [expected]
    assert "HC101" in proc.stdout  # bad.py was still linted


def test_missing_path(tree, run_cli):
    proc = run_cli("nope.py", "bad.py", cwd=tree)
    assert proc.returncode == 2
    assert proc.errors.splitlines() == ["nope.py: error: no such file or directory"]
    assert "HC101" in proc.stdout


def test_all_bad_inputs_together(tree, run_cli):
    for name, (data, _) in BAD_INPUTS.items():
        (tree / name).write_bytes(data)
    proc = run_cli(*BAD_INPUTS, "nope.py", "good.py", cwd=tree)
    assert proc.returncode == 2
    assert len(proc.errors.splitlines()) == len(BAD_INPUTS) + 1
    assert "Traceback" not in proc.stderr


def test_coding_cookie_is_honoured(tmp_path):
    path = tmp_path / "legacy.py"
    path.write_bytes(b"# -*- coding: latin-1 -*-\nname = '\xe9'\n" + GUARDLESS.encode())
    result = lint_paths([path], Config(root=tmp_path))
    assert result.errors == []
    assert [f.code for f in result.findings] == ["HC101"]


def test_prefilter_skips_files_without_a_method_name(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "broken_but_unrelated.py").write_text("def f(:\n")  # never parsed
    (pkg / "caller.py").write_text("def g(cache, op):\n    return cache.can_terminate_prefetch(op)\n")
    (pkg / "impl.py").write_text(GUARDLESS)
    (pkg / "notes.txt").write_text(GUARDLESS)  # not *.py: not collected from a directory
    hidden = pkg / ".venv"
    hidden.mkdir()
    (hidden / "vendored.py").write_text(GUARDLESS)
    result = lint_paths([pkg], Config(root=tmp_path))
    assert result.errors == []
    assert result.files_seen == 4
    assert result.files_parsed == 1  # caller.py passes the prefilter, has no such method
    assert result.methods == 1
    assert [Path(f.path).name for f in result.findings] == ["impl.py"]


def test_usage_errors(run_cli, tmp_path):
    proc = run_cli(cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.errors.splitlines() == [
        "hicache-lint: error: no paths given; pass files or directories, or --repo"]
    proc = run_cli("--repo", "x.py", cwd=tmp_path)
    assert proc.returncode == 2 and "--repo" in proc.stderr
    proc = run_cli("--format", "xml", "x.py", cwd=tmp_path)
    assert proc.returncode == 2 and len(proc.errors.splitlines()) == 1


def test_list_rules(capsys):
    assert main(["--list-rules"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in out] == [
        "HC101", "HC102", "HC103", "HC104", "HC105", "HC106", "HC107", "HC108", "HC109"]
    assert out[-3].startswith("HC107 vote-forcing-guard [warning, fixable]: ")
    assert out[-1].startswith("HC109 pools-unseen [info]: ")


def test_console_script_entry_point_matches_python_m(tree, capsys, monkeypatch):
    assert 'hicache-lint = "lint.cli:main"' in (REPO / "pyproject.toml").read_text()
    monkeypatch.chdir(tree)
    assert main(["bad.py"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("bad.py:2:5: HC101 [error] ")
    assert (REPO / "lint" / "__main__.py").is_file()
    assert sys.modules["lint.cli"].main is main


def test_skip_empty_for_hooks(tree, run_cli):
    (tree / "__init__.py").write_text("")
    proc = run_cli("__init__.py", "good.py", cwd=tree)
    assert proc.returncode == 2 and proc.errors.splitlines() == [
        "__init__.py: error: file is empty; expected Python source"]
    proc = run_cli("--skip-empty", "__init__.py", "good.py", cwd=tree)
    assert (proc.returncode, proc.errors) == (0, "")


def test_version(run_cli):
    from lint import __version__

    proc = run_cli("--version")
    assert (proc.returncode, proc.stdout) == (0, f"hicache-lint {__version__}\n")


def test_exit_zero_keeps_findings_but_not_errors(tree, run_cli):
    proc = run_cli("--exit-zero", "bad.py", cwd=tree)
    assert proc.returncode == 0 and " HC101 " in proc.stdout
    proc = run_cli("--exit-zero", "bad.py", "nope.py", cwd=tree)
    assert proc.returncode == 2


UPSTREAM_SHAPED = REPO / "tests" / "lint" / "samples" / "upstream" / "hiradix_fixed.py.txt"


def test_warnings_alone_exit_0_unless_asked(tree, run_cli):
    shutil.copy(UPSTREAM_SHAPED, tree / "upstream.py")
    proc = run_cli("upstream.py", cwd=tree)
    assert proc.returncode == 0 and " HC107 " in proc.stdout
    proc = run_cli("--fail-on-warnings", "upstream.py", cwd=tree)
    assert proc.returncode == 1
    (tree / "pyproject.toml").write_text("[tool.hicache-lint]\nfail-on-warnings = true\n")
    assert run_cli("upstream.py", cwd=tree).returncode == 1


def test_quiet_prints_errors_only(tree, run_cli):
    shutil.copy(UPSTREAM_SHAPED, tree / "upstream.py")
    quiet = run_cli("-q", "upstream.py", "bad.py", cwd=tree)
    loud = run_cli("upstream.py", "bad.py", cwd=tree)
    assert quiet.returncode == loud.returncode == 1
    codes = [line.split()[1] for line in loud.stdout.splitlines()]
    assert "HC107" in codes and "HC101" in codes
    assert [line.split()[1] for line in quiet.stdout.splitlines()] == [c for c in codes if c != "HC107"]


EVIDENT = GUARDLESS.replace(
    "class Cache:\n",
    "class Cache:\n    def _pending(self, op):\n        return not op.pool_transfers_done\n\n")


def test_diff_previews_the_fix_and_writes_nothing(tmp_path, run_cli):
    (tmp_path / "cache.py").write_text(EVIDENT)
    (tmp_path / "pyproject.toml").write_text(
        '[tool.hicache-lint]\nimplementations = [{method = "cache.py::Cache.can_terminate_prefetch", fenced = true}]\n')
    proc = run_cli("--diff", "cache.py", cwd=tmp_path)
    assert proc.returncode == 1  # the finding is still there: nothing was written
    assert (tmp_path / "cache.py").read_text() == EVIDENT
    assert proc.stdout.startswith("--- a/cache.py\n+++ b/cache.py\n@@ ")
    assert ("+        if completed and op.pool_transfers and not op.pool_transfers_done:\n"
            "+            completed = False\n") in proc.stdout
    assert proc.stderr.startswith("fixed: cache.py: would fix: Cache.can_terminate_prefetch: inserted guard")
    # the patch is exactly what --fix writes
    applied = subprocess.run(["git", "apply", "--unsafe-paths", "-p1", "-"], input=proc.stdout, text=True,
                             cwd=tmp_path, capture_output=True)
    assert applied.returncode == 0, applied.stderr
    patched = (tmp_path / "cache.py").read_text()
    (tmp_path / "cache.py").write_text(EVIDENT)
    assert run_cli("--fix", "cache.py", cwd=tmp_path).returncode == 0
    assert (tmp_path / "cache.py").read_text() == patched
    assert run_cli("--diff", "--fix", "cache.py", cwd=tmp_path).returncode == 2


def make_links(tree: Path) -> None:
    (tree / "loop.py").symlink_to("loop.py")
    (tree / "dangling.py").symlink_to("missing.py")
    pkg = tree / "pkg"
    pkg.mkdir()
    (pkg / "impl.py").write_text(GUARDLESS)
    (pkg / "cycle.py").symlink_to("cycle.py")
    (pkg / "dead.py").symlink_to("nowhere.py")


def test_symlink_loops_and_dangling_links_are_one_line_each(tree, run_cli):
    make_links(tree)
    proc = run_cli("loop.py", "dangling.py", "pkg", "good.py", cwd=tree)
    assert proc.returncode == 2
    assert proc.errors.splitlines() == [
        "dangling.py: error: dangling symbolic link to 'missing.py'; expected a file or directory",
        "loop.py: error: symbolic link loop; expected a file or directory",
        "pkg/cycle.py: error: symbolic link loop; expected a file or directory",
        "pkg/dead.py: error: dangling symbolic link to 'nowhere.py'; expected a file or directory",
    ]
    assert proc.stdout.startswith("pkg/impl.py:2:5: HC101 [error] ")  # the rest is still linted


def test_sarif_is_written_despite_a_link_loop(tree, run_cli):
    import json

    make_links(tree)
    proc = run_cli("--format", "sarif", "loop.py", "pkg", cwd=tree)
    assert proc.returncode == 2
    doc = json.loads(proc.stdout)
    (run,) = doc["runs"]
    assert [r["ruleId"] for r in run["results"]] == ["HC101"]
    notes = run["invocations"][0]["toolExecutionNotifications"]
    assert [n["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for n in notes] == [
        "loop.py", "pkg/cycle.py", "pkg/dead.py"]
    assert run["invocations"][0]["executionSuccessful"] is False
