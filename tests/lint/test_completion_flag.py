"""`completion-flag`: the guard's flag is the configured name, in every rule, the fix and the
evidence; a configured implementation whose flag is gone fails the run."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from lint.api import fix_source, lint_source
from lint.config import from_table
from lint.rules import ALL_RULES

FLAG, RENAMED = "pool_transfers_done", "pool_io_done"
EXAMPLES = [pytest.param(rule, kind, i, id=f"{rule.code}-{kind}-{i}")
            for rule in ALL_RULES for kind in ("VALID", "INVALID") for i in range(len(getattr(rule, kind)))]


def _example(rule, kind: str, index: int) -> tuple[str, dict, str | None]:
    example = getattr(rule, kind)[index]
    if isinstance(example, str):
        return example, {}, None
    return example.code, dict(example.config or {}), getattr(example, "fixed", None)


def _seen(code: str, table: dict, flag: str) -> list[tuple[str, int, str, str]]:
    config = from_table({**table, "completion-flag": flag}, "example", Path.cwd(), None)
    result = lint_source(code, config)
    assert result.errors == []
    # where the flag is found may be this repository's tree (which defines only the default name)
    return [(f.code, f.line, f.message.replace(flag, "<flag>"), _WHERE.sub("flag: <found>", f.evidence.replace(flag, "<flag>")))
            for f in result.findings]


_WHERE = re.compile(r"flag: \S+ (defines|reads) '<flag>'")


@pytest.mark.parametrize("rule, kind, index", EXAMPLES)
def test_every_rule_example_judges_the_renamed_flag_alike(rule, kind, index):
    """Each rule example with the flag renamed, and completion-flag saying so, gets the same findings."""
    code, table, fixed = _example(rule, kind, index)
    assert _seen(code.replace(FLAG, RENAMED), table, RENAMED) == _seen(code, table, FLAG)
    if fixed is not None:
        config = from_table({**table, "completion-flag": RENAMED}, "example", Path.cwd(), None)
        assert fix_source(code.replace(FLAG, RENAMED), config) == fixed.replace(FLAG, RENAMED)


def test_the_default_flag_no_longer_guards_once_another_is_configured():
    """A guard on the old name is no guard of the configured one (HC101 names what it reads)."""
    code = next(c for c, _, _ in (_example(r, "VALID", 0) for r in ALL_RULES if r.code == "HC101"))
    findings = _seen(code, {}, RENAMED)
    assert any(f[0] == "HC101" for f in findings), findings


CACHE = '''
class Operation:
    def __init__(self, pool_transfers):
        self.pool_transfers = pool_transfers
        self.{flag} = not pool_transfers


class Cache:
    def prefetch(self, request, pools):
        self.ongoing[request] = Operation(pool_transfers=[pool.start(request) for pool in pools])

    def can_terminate_prefetch(self, operation):
        completed = operation.completed_tokens == len(operation.hash_value) * self.page_size
{guard}        return completed
'''
GUARD = "        if completed and operation.pool_transfers and not operation.{flag}:\n            completed = False\n"


def _project(tmp_path: Path, flag: str, guarded: bool, configured_flag: str | None) -> Path:
    lines = ['[tool.hicache-lint]', 'implementations = ["cache.py::Cache.can_terminate_prefetch"]']
    if configured_flag is not None:
        lines.append(f'completion-flag = "{configured_flag}"')
    (tmp_path / "pyproject.toml").write_text("\n".join(lines) + "\n")
    (tmp_path / "cache.py").write_text(CACHE.format(flag=flag, guard=GUARD.format(flag=flag) if guarded else ""))
    return tmp_path


def _lint(run_cli, tree: Path) -> subprocess.CompletedProcess:
    return run_cli("cache.py", cwd=tree)


def test_renaming_the_flag_everywhere_then_dropping_the_guard_fails_the_run(tmp_path, run_cli):
    proc = _lint(run_cli, _project(tmp_path, RENAMED, guarded=False, configured_flag=None))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "HC101" in proc.stdout
    assert f"completion flag '{FLAG}' (completion-flag) is defined and read nowhere" in proc.stdout
    assert f"line 5 defines '{RENAMED}': if the flag was renamed, set completion-flag to the new name" in proc.stdout


def test_a_flag_that_never_existed_stays_a_note(tmp_path, run_cli):
    """Pools read with the KV pages and no completion tracked apart: nothing to guard yet (HC109)."""
    tree = _project(tmp_path, RENAMED, guarded=False, configured_flag=None)
    (tree / "cache.py").write_text((tree / "cache.py").read_text().replace(f"        self.{RENAMED} = not pool_transfers\n", ""))
    (tree / "pyproject.toml").write_text('[tool.hicache-lint]\nimplementations = [{method = '
                                         '"cache.py::Cache.can_terminate_prefetch", extra-pools = true}]\n')
    proc = _lint(run_cli, tree)
    assert proc.returncode == 0 and " HC109 " in proc.stdout, proc.stdout


def test_the_renamed_flag_configured_checks_the_guard_again(tmp_path, run_cli):
    clean = _lint(run_cli, _project(tmp_path, RENAMED, guarded=True, configured_flag=RENAMED))
    assert (clean.returncode, clean.stdout) == (0, ""), clean.stdout + clean.stderr
    dropped = _lint(run_cli, _project(tmp_path, RENAMED, guarded=False, configured_flag=RENAMED))
    assert dropped.returncode == 1
    assert f"has no {RENAMED} guard" in dropped.stdout
    assert f"defines '{RENAMED}'" in dropped.stdout


def test_a_guard_kept_under_a_renamed_flag_the_configuration_does_not_know_fails_too(tmp_path, run_cli):
    """Renamed everywhere, guard kept, configuration untouched: the guard reads a name that is not
    the configured flag, and nothing defines that flag: the run fails and says how to fix it."""
    proc = _lint(run_cli, _project(tmp_path, RENAMED, guarded=True, configured_flag=None))
    assert proc.returncode == 1
    assert f"it reads '{RENAMED}'" in proc.stdout and "set completion-flag to the new name" in proc.stdout
