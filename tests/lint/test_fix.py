"""--fix: inserts / moves guards, preserves everything else, idempotent, lints clean."""

from __future__ import annotations

import difflib
import json
import shutil

from pathlib import Path

from lint.api import fix_source, lint_paths, lint_source
from lint.config import Config, from_table
from lint.rules.base import POOLED_TAIL, fenced


def fenced_config(*classes: str, root: Path | None = None) -> Config:
    return from_table(fenced(*classes), "test", root or Path.cwd(), None)


def errors(text: str, config: Config | None = None) -> list[str]:
    return [str(f) for f in lint_source(text, config).findings if f.code != "HC107"]

ODD_FORMATTING = '''\
"""Module docstring stays."""
import torch  # trailing comment stays


class  Weird :  # odd spacing stays
  extra_pools = ("indexer",)  # a two-space indentation file

  def helper(self, op): return op.pool_transfers_done  # one-liner stays

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
    config = fenced_config("Weird")
    fixed = fix_source(ODD_FORMATTING, config)
    added, removed = added_and_removed(ODD_FORMATTING, fixed)
    assert removed == []
    # the file reads only the done flag on the operation: that is all the guard reads
    assert added == [
        "    # KV alone is not complete while extra-pool transfers still run.",
        "    if completed and not op.pool_transfers_done:",
        "      completed = False",
    ]
    # inserted right after the (multi-line) predicate binding
    lines = fixed.splitlines()
    at = lines.index(added[0])
    assert lines[at - 1].endswith("# continuation line stays")
    assert fix_source(fixed, config) == fixed
    assert [str(f) for f in lint_source(fixed, config).findings] == []


def test_unfenced_insert_is_upstreams_guard_after_the_policy_branches():
    fixed = fix_source(ODD_FORMATTING)
    added, removed = added_and_removed(ODD_FORMATTING, fixed)
    assert removed == []
    assert added == [
        "    # Vote no while KV is complete but extra-pool transfers still run.",
        "    if completed and not op.pool_transfers_done:",
        "      vote = False",
    ]
    lines = fixed.splitlines()
    assert lines[lines.index(added[-1]) + 1] == "    return vote"
    assert errors(fixed) == []
    assert [f.code for f in lint_source(fixed).findings] == ["HC107"]


def test_getattr_spelling_and_quote_style_follow_the_file():
    text = ODD_FORMATTING.replace(
        "  def helper(self, op): return op.pool_transfers_done  # one-liner stays",
        "  def helper(self, op): return getattr(op, 'pool_transfers', None) and not getattr(op, 'pool_transfers_done', True)",
    )
    config = fenced_config("Weird")
    fixed = fix_source(text, config)
    assert ("    if completed and getattr(op, 'pool_transfers', None) and not "
            "getattr(op, 'pool_transfers_done', True):") in fixed.splitlines()
    assert [str(f) for f in lint_source(fixed, config).findings] == []


def test_nested_class_method_is_fixed_in_place():
    text = (
        "class Outer:\n"
        "    class Inner:\n"
        "        def _pending(self, op):\n"
        "            return op.pool_transfers and not op.pool_transfers_done\n"
        "\n"
        "        def can_terminate_prefetch(self, op):\n"
        "            completed = op.completed_tokens == len(op.hash_value) * self.page_size\n"
        "            return completed\n"
        "\n"
        "x = 1\n"
    )
    config = fenced_config("Outer.Inner")
    result = lint_source(text, config)
    assert [(f.code, f.method) for f in result.findings] == [("HC101", "Outer.Inner.can_terminate_prefetch")]
    fixed = fix_source(text, config)
    assert fixed.splitlines()[7] == "            # KV alone is not complete while extra-pool transfers still run."
    assert fixed.splitlines()[8] == "            if completed and op.pool_transfers and not op.pool_transfers_done:"
    assert fixed.splitlines()[9] == "                completed = False"
    assert fixed.endswith("\nx = 1\n")
    assert lint_source(fixed, config).findings == []


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
        "    def other(self, op):\n"
        "        return op.pool_transfers_done\n"
    ) + POOLED_TAIL
    config = fenced_config("Cache")
    result = lint_source(text, config)
    assert [(f.code, f.line, f.col) for f in result.findings] == [("HC101", 2, 5)]
    fixed = fix_source(text, config)
    added, removed = added_and_removed(text, fixed)
    assert removed == [] and len(added) == 3
    assert "starts at column 0\n" in fixed
    assert lint_source(fixed, config).findings == []
    assert fix_source(fixed, config) == fixed


def test_crlf_and_bom_survive(tmp_path):
    path = tmp_path / "cache.py"
    text = ODD_FORMATTING.replace("\n", "\r\n")
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    config = from_table(
        {"implementations": [{"method": "cache.py::Weird.can_terminate_prefetch", "fenced": True}]},
        "test", tmp_path, None)
    result = lint_paths([path], config, fix=True)
    assert result.findings == [] and result.errors == []
    data = path.read_bytes()
    assert data.startswith(b"\xef\xbb\xbf")
    assert b"\n" not in data.replace(b"\r\n", b"")
    assert b"if completed and not op.pool_transfers_done:\r\n" in data


def test_cli_fix_on_broken_sample(samples, tmp_path, run_cli):
    target = tmp_path / "broken.py"
    shutil.copy(samples / "broken_variants.py.txt", target)
    original = target.read_text()
    first = run_cli("--fix", "--format", "json", str(target), cwd=tmp_path)
    assert first.returncode == 1, first.stderr
    doc = json.loads(first.stdout)
    # left: the drift nobody can fix automatically, and upstream's form where the
    # fix wrote it (nothing here is configured fenced)
    assert [(f["code"], f["method"]) for f in doc["findings"]] == [
        ("HC107", "NoGuardCache.can_terminate_prefetch"),
        ("HC107", "VoteKeyedCache.can_terminate_prefetch"),
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
        "        # Vote no while KV is complete but extra-pool transfers still run.",
    }
    assert set(added) | set(removed) <= guard_lines
    assert len(removed) == 3 and len(added) == 6
    # the suppressed legacy class is left alone
    legacy = fixed[fixed.index("class LegacyCpuOnlyCache"):]
    assert "pool_transfers_done" not in legacy
    second = run_cli("--fix", str(target), cwd=tmp_path)
    assert second.returncode == 1  # the drift
    assert target.read_text() == fixed, "second --fix changed the file"
    assert "fixed:" not in second.stderr


def test_unfixable_finding_is_reported_and_file_left_alone(tmp_path):
    path = tmp_path / "cache.py"
    text = (
        "class Cache:\n"
        "    def can_terminate_prefetch(self, op):\n"
        "        return op.completed_tokens == len(op.hash_value) * self.page_size\n"
    ) + POOLED_TAIL
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
''' + POOLED_TAIL
    (finding,) = [f for f in lint_source(text).findings if f.code == "HC103"]
    assert not finding.fixable
    assert fix_source(text) == text


EARLY_RETURN = '''
class Cache:
    def can_terminate_prefetch(self, op):
        completed = op.completed_tokens == len(op.hash_value) * self.page_size
        can_terminate = completed
        if not op.pool_transfers_done:
            return False
        flags = self.reducer.all_reduce_max([1 - int(can_terminate), int(op.is_terminated())], name="t")
        return flags[0] == 0 or flags[1] == 1
''' + POOLED_TAIL


def test_early_return_guard_becomes_an_assignment_fenced():
    codes = sorted(f.code for f in lint_source(EARLY_RETURN).findings)
    assert codes == ["HC102", "HC103"]
    config = fenced_config("Cache")
    fixed = fix_source(EARLY_RETURN, config)
    assert "        if not op.pool_transfers_done:\n            completed = False\n        can_terminate = completed\n" in fixed
    assert "return False" not in fixed
    assert lint_source(fixed, config).findings == []


def test_early_return_guard_becomes_upstreams_form_unfenced():
    fixed = fix_source(EARLY_RETURN)
    assert ("        can_terminate = completed\n        if completed and not op.pool_transfers_done:\n"
            "            can_terminate = False\n        flags = ") in fixed
    assert "return False" not in fixed
    assert [f.code for f in lint_source(fixed).findings] == ["HC107"]


SNAPSHOT = '''
class Cache:
    def can_terminate_prefetch(self, operation):
        snap = operation.progress()
        completed = snap.completed_tokens == len(snap.hash_value) * self.page_size
        return completed
''' + POOLED_TAIL

SNAPSHOT_READER = '''
class Other:
    def check(self, op):
        progress = op.progress()
        return progress.pool_transfers_present and not progress.pool_transfers_done

    def stale(self, op):
        return op.pool_transfers and not op.pool_transfers_done
'''


def test_inserted_guard_reads_only_fields_seen_on_the_same_kind_of_object(tmp_path):
    # the operation's fields are known, the snapshot's are not: decline
    config = fenced_config("Cache")
    text = SNAPSHOT + SNAPSHOT_READER.split("    def stale")[0].replace("def check", "def unrelated") \
        .replace("progress = op.progress()\n        return progress", "return op")
    assert "op.pool_transfers_present" in text
    (finding,) = lint_source(text, config).findings
    assert (finding.code, finding.fixable) == ("HC101", False)
    assert fix_source(text, config) == text
    # a snapshot of the same kind elsewhere in the file names the fields
    text = SNAPSHOT + SNAPSHOT_READER
    fixed = fix_source(text, config)
    assert "        if completed and snap.pool_transfers_present and not snap.pool_transfers_done:\n" in fixed
    assert lint_source(fixed, config).findings == []


def test_decline_is_one_line_on_stderr(tmp_path, run_cli):
    (tmp_path / "cache.py").write_text(SNAPSHOT)
    (tmp_path / "pyproject.toml").write_text(
        '[tool.hicache-lint]\nimplementations = [{method = "cache.py::Cache.can_terminate_prefetch", fenced = true}]\n')
    proc = run_cli("--fix", "cache.py", cwd=tmp_path)
    assert proc.returncode == 1
    assert (tmp_path / "cache.py").read_text() == SNAPSHOT
    (line,) = proc.errors.splitlines()
    assert line.startswith("cache.py: not fixed: Cache.can_terminate_prefetch: no read of pool_transfers_done "
                           "on 'snap' (the operation's progress())")


def test_evidence_from_the_files_linted_together(tmp_path):
    (tmp_path / "cache.py").write_text(SNAPSHOT)
    (tmp_path / "other.py").write_text(SNAPSHOT_READER)
    config = from_table(
        {"implementations": [{"method": "cache.py::Cache.can_terminate_prefetch", "fenced": True}]},
        "test", tmp_path, None)
    alone = lint_paths([tmp_path / "cache.py"], config, fix=True)
    assert [f.code for f in alone.findings] == ["HC101"] and alone.fixed == []
    together = lint_paths([tmp_path / "cache.py", tmp_path / "other.py"], config, fix=True)
    assert together.findings == [] and len(together.fixed) == 1
    assert "snap.pool_transfers_present and not snap.pool_transfers_done" in (tmp_path / "cache.py").read_text()


def test_evidence_from_the_configured_implementations(tmp_path):
    (tmp_path / "cache.py").write_text(SNAPSHOT)
    (tmp_path / "sibling.py").write_text(SNAPSHOT_READER.replace("def check", "def can_terminate_prefetch"))
    config = from_table({"implementations": [
        {"method": "cache.py::Cache.can_terminate_prefetch", "fenced": True},
        "sibling.py::Other.can_terminate_prefetch"]}, "test", tmp_path, None)
    result = lint_paths([tmp_path / "cache.py"], config, fix=True)
    assert result.findings == [], [str(f) for f in result.findings]
    assert "snap.pool_transfers_present and not snap.pool_transfers_done" in (tmp_path / "cache.py").read_text()


def test_upstream_form_is_left_alone_unless_fenced():
    from lint.rules.guard_upstream import FORCES_VOTE, FORCES_VOTE_FENCED_FIXED

    (finding,) = lint_source(FORCES_VOTE).findings
    assert (finding.code, finding.fixable) == ("HC107", False)
    assert fix_source(FORCES_VOTE) == FORCES_VOTE
    assert fix_source(FORCES_VOTE, fenced_config("HiRadixCache")) == FORCES_VOTE_FENCED_FIXED


def test_a_fix_that_would_leave_an_error_is_not_written(tmp_path, run_cli):
    # upstream's guard would go after `can_terminate = ...`, which the
    # wait_complete return already bypassed: the re-lint catches it
    text = '''
class Cache:
    def _pending(self, op):
        return op.pool_transfers and not op.pool_transfers_done

    def can_terminate_prefetch(self, op):
        completed = op.completed_tokens == len(op.hash_value) * self.page_size
        if self.prefetch_stop_policy == "wait_complete":
            return completed
        can_terminate = completed or self.timed_out(op)
        return can_terminate
'''
    (tmp_path / "cache.py").write_text(text)
    proc = run_cli("--fix", "cache.py", cwd=tmp_path)
    assert proc.returncode == 1
    assert (tmp_path / "cache.py").read_text() == text
    assert proc.errors.splitlines() == [
        "cache.py: not fixed: Cache.can_terminate_prefetch: the fix would still leave HC103"]
    assert [line.split()[1] for line in proc.stdout.splitlines()] == ["HC101"]
