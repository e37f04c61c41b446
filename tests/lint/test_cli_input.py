"""Command line: runs that would check nothing are refused, --list-rules as JSON,
and the level on each text finding line."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from lint.cli import main
from lint.rules import ALL_RULES

from guardless_sample import GUARDLESS

REPO = Path(__file__).resolve().parents[2]
SUMMARY = re.compile(r"^hicache-lint: \d+ methods? checked in ")
CODES = ", ".join(rule.code for rule in ALL_RULES)
ACCEPTED = f"accepted: at least one of rule codes {CODES}, their prefixes (HC1), ALL, or their names"



@pytest.fixture
def tree(isolated: Path) -> Path:
    (isolated / "bad.py").write_text(GUARDLESS)
    return isolated


def run(capsys, *args: str) -> tuple[int, str, list[str]]:
    """main() as the console script runs it: (exit status, stdout, stderr lines without the summary)."""
    try:
        code = main(list(args))
    except SystemExit as exc:  # argparse's usage errors
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, [line for line in err.splitlines() if not SUMMARY.match(line)]


@pytest.mark.parametrize("value", ["", " , "])
def test_an_empty_select_flag_is_refused(tree, capsys, value):
    code, out, err = run(capsys, "--select", value, "bad.py")
    assert (code, out) == (2, "")
    assert err == [f"hicache-lint: error: --select '' selects no rule; {ACCEPTED} (leave it out to check every rule)"]


@pytest.mark.parametrize("key", ["select", "enable"])
def test_an_empty_select_in_the_configuration_is_refused(tree, capsys, key):
    (tree / "pyproject.toml").write_text(f"[tool.hicache-lint]\n{key} = []\n")
    code, out, err = run(capsys, "bad.py")
    assert (code, out) == (2, "")
    assert err == [f"{tree.resolve() / 'pyproject.toml'}: error: [tool.hicache-lint] select = [] selects no rule; "
                   f"{ACCEPTED} (leave it out to check every rule)"]
    # what does select still runs
    (tree / "pyproject.toml").write_text(f'[tool.hicache-lint]\n{key} = ["HC101"]\n')
    assert run(capsys, "bad.py")[0] == 1


NOT_PYTHON = ("not a Python file; expected a .py file (or *.py.txt), a script whose #! line names python, "
              "or a directory")
NO_PYTHON_FILE = ("no Python file in this directory (excluded and git-ignored ones left out); "
                  "expected a directory holding *.py files, or pass --allow-empty")


def test_a_file_that_is_not_python_is_an_error(tree, capsys):
    (tree / "README.md").write_text("# Cache\n\nSee `can_terminate_prefetch`.\n")
    (tree / "notes.txt").write_text("nothing to see\n")
    code, out, err = run(capsys, "README.md", "notes.txt", "bad.py")
    assert code == 2 and " HC101 " in out  # the rest is still linted
    assert err == [f"README.md: error: {NOT_PYTHON}", f"notes.txt: error: {NOT_PYTHON}"]
    # a script is Python by its #! line, a sample by its name; each may hold no method, as any Python file
    (tree / "tool").write_text("#!/usr/bin/env python3\nprint('hi')\n")
    (tree / "sample.py.txt").write_text("x = 1\n")
    assert run(capsys, "tool", "sample.py.txt") == (0, "", [])


def test_a_directory_with_no_python_file_is_an_error(tree, capsys):
    (tree / "docs").mkdir()
    (tree / "docs" / "index.md").write_text("# Docs\n")
    code, out, err = run(capsys, "docs", "bad.py")
    assert code == 2 and " HC101 " in out
    assert err == [f"docs: error: {NO_PYTHON_FILE}"]
    assert run(capsys, "--allow-empty", "docs")[0] == 0


def test_list_rules_as_json(capsys):
    code, out, _ = run(capsys, "--list-rules", "--format", "json")
    rules = json.loads(out)
    assert code == 0 and [r["code"] for r in rules] == [rule.code for rule in ALL_RULES]
    for listed, rule in zip(rules, ALL_RULES):
        assert (listed["name"], listed["level"], listed["summary"], listed["fixable"], listed["suppressible"]) == (
            rule.name, rule.level, rule.summary, rule.fixable, rule.suppressible)
        assert listed["help"] == rule.help() and listed["clauses"] == list(rule.clauses)


def test_each_text_finding_names_its_level(tree, capsys):
    shutil.copy(REPO / "tests" / "lint" / "samples" / "upstream" / "hiradix_fixed.py.txt", tree / "upstream.py")
    code, out, _ = run(capsys, "bad.py", "upstream.py")
    lines = out.splitlines()
    assert code == 1
    assert lines[0].startswith("bad.py:2:5: HC101 [error] Cache.can_terminate_prefetch has no")
    assert any(line.startswith("upstream.py:") and " HC107 [warning] HiRadixCache.can_terminate_prefetch " in line
               for line in lines), lines
