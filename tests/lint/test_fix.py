"""--fix: inserts / moves guards, preserves everything else, idempotent, lints clean."""

from __future__ import annotations

import difflib
import json
import shutil

from lint.api import fix_source, lint_paths, lint_source
from lint.config import Config

FIXABLE = {"HC101", "HC102", "HC103"}

ODD_FORMATTING = '''\
"""Module docstring stays."""
import torch  # trailing comment stays


class  Weird :  # odd spacing stays
  """Two-space indentation file."""

  def helper(self): return 1  # one-liner stays

  def can_terminate_prefetch(self,op):   # def-line comment stays
    vote=True   # no spaces around '='
    if self.prefetch_stop_policy=='best_effort':
      return vote


    # completion, computed the long way
    completed=(op.completed_tokens ==
               len(op.hash_value)*self.page_size)   # continuation line stays
    if self.prefetch_stop_policy=='wait_complete': vote=completed
    elif self.prefetch_stop_policy=='timeout':
      vote=completed or self.timed_out(op)
    return vote
'''


def added_and_removed(before: str, after: str) -> tuple[list[str], list[str]]:
    diff = list(difflib.ndiff(before.splitlines(), after.splitlines()))
    added = [d[2:] for d in diff if d.startswith("+ ")]
    removed = [d[2:] for d in diff if d.startswith("- ")]
    return added, removed


def test_insert_preserves_formatting_and_comments():
    fixed = fix_source(ODD_FORMATTING)
    added, removed = added_and_removed(ODD_FORMATTING, fixed)
    assert removed == []
    assert added == [
        "    # KV alone is not complete while extra-pool transfers still run.",
        "    if completed and op.pool_transfers and not op.pool_transfers_done:",
        "      completed = False",
    ]
    # inserted right after the (multi-line) predicate binding
    lines = fixed.splitlines()
    at = lines.index(added[0])
    assert lines[at - 1].endswith("# continuation line stays")
    assert fix_source(fixed) == fixed
    assert [str(f) for f in lint_source(fixed).findings] == []


def test_getattr_spelling_and_quote_style_follow_the_file():
    text = ODD_FORMATTING.replace(
        "  def helper(self): return 1  # one-liner stays",
        "  def helper(self, op): return getattr(op, 'pool_transfers', None)",
    )
    fixed = fix_source(text)
    assert ("    if completed and getattr(op, 'pool_transfers', None) and not "
            "getattr(op, 'pool_transfers_done', True):") in fixed.splitlines()
    assert [str(f) for f in lint_source(fixed).findings] == []


def test_nested_class_method_is_fixed_in_place():
    text = (
        "class Outer:\n"
        "    class Inner:\n"
        "        def can_terminate_prefetch(self, op):\n"
        "            completed = op.completed_tokens == len(op.hash_value) * self.page_size\n"
        "            return completed\n"
        "\n"
        "x = 1\n"
    )
    result = lint_source(text)
    assert [(f.code, f.method) for f in result.findings] == [("HC101", "Outer.Inner.can_terminate_prefetch")]
    fixed = fix_source(text)
    assert fixed.splitlines()[4] == "            # KV alone is not complete while extra-pool transfers still run."
    assert fixed.splitlines()[5] == "            if completed and op.pool_transfers and not op.pool_transfers_done:"
    assert fixed.splitlines()[6] == "                completed = False"
    assert fixed.endswith("\nx = 1\n")
    assert lint_source(fixed).findings == []


def test_method_with_undented_string_falls_back_to_whole_module():
    text = (
        "class Cache:\n"
        "    def can_terminate_prefetch(self, op):\n"
        '        note = """\n'
        "starts at column 0\n"
        '"""\n'
        "        completed = op.completed_tokens == len(op.hash_value) * self.page_size\n"
        "        return completed\n"
        "\n"
        "    def other(self):\n"
        "        return 2\n"
    )
    result = lint_source(text)
    assert [(f.code, f.line, f.col) for f in result.findings] == [("HC101", 2, 5)]
    fixed = fix_source(text)
    added, removed = added_and_removed(text, fixed)
    assert removed == [] and len(added) == 3
    assert "starts at column 0\n" in fixed
    assert lint_source(fixed).findings == []
    assert fix_source(fixed) == fixed


def test_crlf_and_bom_survive(tmp_path):
    path = tmp_path / "cache.py"
    text = ODD_FORMATTING.replace("\n", "\r\n")
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    result = lint_paths([path], Config(root=tmp_path), fix=True)
    assert result.findings == [] and result.errors == []
    data = path.read_bytes()
    assert data.startswith(b"\xef\xbb\xbf")
    assert b"\n" not in data.replace(b"\r\n", b"")
    assert b"if completed and op.pool_transfers and not op.pool_transfers_done:\r\n" in data


def test_cli_fix_on_broken_sample(samples, tmp_path, run_cli):
    target = tmp_path / "broken.py"
    shutil.copy(samples / "broken_variants.py.txt", target)
    original = target.read_text()
    first = run_cli("--fix", "--format", "json", str(target), cwd=tmp_path)
    assert first.returncode == 1, first.stderr
    doc = json.loads(first.stdout)
    # only the drift nobody can fix automatically is left
    assert [(f["code"], f["method"]) for f in doc["findings"]] == [
        ("HC104", "UncappedTimeoutCache.can_terminate_prefetch")]
    assert len(doc["fixed"]) == 3
    fixed = target.read_text()
    added, removed = added_and_removed(original, fixed)
    # only guard lines moved or were added; nothing else changed
    guard_lines = {
        "        if completed and operation.pool_transfers and not operation.pool_transfers_done:",
        "            completed = False",
        "        if can_terminate and operation.pool_transfers and not operation.pool_transfers_done:",
        "            can_terminate = False",
        "        # KV alone is not complete while extra-pool transfers still run.",
    }
    assert set(added) | set(removed) <= guard_lines
    assert len(removed) == 4 and len(added) == 7
    # the suppressed legacy class is left alone
    legacy = fixed[fixed.index("class LegacyCpuOnlyCache"):]
    assert "pool_transfers_done" not in legacy
    second = run_cli("--fix", str(target), cwd=tmp_path)
    assert second.returncode == 1
    assert target.read_text() == fixed, "second --fix changed the file"
    assert "fixed:" not in second.stderr


def test_unfixable_finding_is_reported_and_file_left_alone(tmp_path):
    path = tmp_path / "cache.py"
    text = (
        "class Cache:\n"
        "    def can_terminate_prefetch(self, op):\n"
        "        return op.completed_tokens == len(op.hash_value) * self.page_size\n"
    )
    path.write_text(text)
    result = lint_paths([path], Config(root=tmp_path), fix=True)
    assert [(f.code, f.fixable) for f in result.findings] == [("HC101", False)]
    assert "no completion predicate local" in result.findings[0].message
    assert path.read_text() == text
    assert result.fixed == []


def test_bypass_is_not_auto_fixed():
    text = '''
class Cache:
    def can_terminate_prefetch(self, op):
        completed = op.completed_tokens == len(op.hash_value) * self.page_size
        if self.prefetch_stop_policy == "wait_complete":
            return completed
        if completed and not op.pool_transfers_done:
            completed = False
        return completed or self.timed_out(op)
'''
    (finding,) = [f for f in lint_source(text).findings if f.code == "HC103"]
    assert not finding.fixable
    assert fix_source(text) == text


def test_early_return_guard_becomes_an_assignment():
    text = '''
class Cache:
    def can_terminate_prefetch(self, op):
        completed = op.completed_tokens == len(op.hash_value) * self.page_size
        can_terminate = completed
        if not op.pool_transfers_done:
            return False
        flags = self.reducer.all_reduce_max([1 - int(can_terminate), int(op.is_terminated())], name="t")
        return flags[0] == 0 or flags[1] == 1
'''
    codes = sorted(f.code for f in lint_source(text).findings)
    assert codes == ["HC102", "HC103"]
    fixed = fix_source(text)
    assert "        if not op.pool_transfers_done:\n            completed = False\n        can_terminate = completed\n" in fixed
    assert "return False" not in fixed
    assert lint_source(fixed).findings == []


def test_inserted_guard_reads_the_object_and_field_names_the_file_uses():
    text = '''
class Cache:
    def _has_side_pools(self, snap):
        return snap.pool_transfers_present

    def can_terminate_prefetch(self, operation):
        snap = operation.progress()
        completed = snap.completed_tokens == len(snap.hash_value) * self.page_size
        return completed
'''
    fixed = fix_source(text)
    assert "        if completed and snap.pool_transfers_present and not snap.pool_transfers_done:\n" in fixed
    assert lint_source(fixed).findings == []
