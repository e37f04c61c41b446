"""Hand-written modules nobody here wrote the linter for, with the verdicts each must get.

tests/lint/samples/upstream/ holds samples shaped like SGLang's three cache
classes (written here, not copied): before PR #27550 (991689fd0~1, HiRadixCache
without the check) and after it (991689fd0, 9e9fde147: all three force the vote).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lint.api import lint_paths, lint_source
from lint.config import Config
from lint.rules.base import POOLED_TAIL

UPSTREAM = Path(__file__).resolve().parent / "samples" / "upstream"
SIBLINGS = ["unified_radix.py.txt", "hi_mamba_radix.py.txt"]  # the same shape at all three commits
BEFORE_FIX = ["hiradix_prefix.py.txt"] + SIBLINGS  # 991689fd0~1
AFTER_FIX = ["hiradix_fixed.py.txt"] + SIBLINGS  # 991689fd0 and 9e9fde147


def found(result) -> list[tuple[str, int, str, str]]:
    return [(Path(f.path).name, f.line, f.code, f.method or "") for f in result.findings]


def codes_by_class(result) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for f in result.findings:
        out.setdefault((f.method or "").split(".")[0], []).append(f.code)
    return out


def copy_set(names: list[str], into: Path) -> list[Path]:
    paths = []
    for name in names:
        target = into / name.replace(".py.txt", ".py")
        shutil.copy(UPSTREAM / name, target)
        paths.append(target)
    return paths


def test_before_the_fix_only_hiradix_is_an_error():
    result = lint_paths([UPSTREAM / n for n in BEFORE_FIX])
    assert result.errors == []
    assert codes_by_class(result) == {
        "HiRadixCache": ["HC101"],
        # the guard in upstream's shape: one warning each, no error about the guard
        "UnifiedRadixCache": ["HC104", "HC107"],
        "HiMambaRadixCache": ["HC107"],
    }
    drift = next(f for f in result.findings if f.code == "HC104")
    # the uncapped timeout (spec T1) is a separate, real deviation
    assert "'timeout-cap'" in drift.message and "'uncapped'" in drift.message
    assert result.exit_code == 1


def test_after_the_fix_every_class_gets_one_warning():
    result = lint_paths([UPSTREAM / n for n in AFTER_FIX], fixability=True)
    assert result.errors == []
    assert codes_by_class(result) == {
        "HiRadixCache": ["HC107"],
        "UnifiedRadixCache": ["HC104", "HC107"],
        "HiMambaRadixCache": ["HC107"],
    }
    for finding in result.findings:
        if finding.code == "HC107":
            assert "forces the vote 'can_terminate'" in finding.message
            assert "issue #35012" in finding.message and "clamped to every pool" in finding.message
            assert not finding.fixable
    alone = lint_paths([UPSTREAM / "hiradix_fixed.py.txt"])
    assert [f.code for f in alone.findings] == ["HC107"] and alone.exit_code == 0


def test_fail_on_warnings_makes_upstreams_shape_fail():
    result = lint_paths([UPSTREAM / "hiradix_fixed.py.txt"], Config(fail_on_warnings=True))
    assert [f.code for f in result.findings] == ["HC107"] and result.exit_code == 1


def test_fix_leaves_upstreams_guards_alone_and_adds_one_where_it_is_missing(tmp_path):
    paths = copy_set(BEFORE_FIX, tmp_path)
    before = {p: p.read_text() for p in paths}
    result = lint_paths(paths, Config(root=tmp_path), fix=True)
    assert result.errors == []
    hiradix, unified, mamba = paths
    assert unified.read_text() == before[unified] and mamba.read_text() == before[mamba]
    # hiradix gets the guard upstream itself added, spelled like its siblings
    added = [line for line in hiradix.read_text().splitlines() if line not in before[hiradix].splitlines()]
    assert added == [
        "        # Vote no while KV is complete but extra-pool transfers still run.",
        '        if completed and getattr(operation, "pool_transfers", None) '
        'and not getattr(operation, "pool_transfers_done", True):',
        "            can_terminate = False",
    ]
    assert codes_by_class(result)["HiRadixCache"] == ["HC107"]
    assert result.exit_code == 1  # the unified timeout drift remains


def test_fix_changes_nothing_on_the_fixed_shape(tmp_path):
    paths = copy_set(AFTER_FIX, tmp_path)
    before = [p.read_text() for p in paths]
    result = lint_paths(paths, Config(root=tmp_path), fix=True)
    assert result.fixed == [] and result.declined == []
    assert [p.read_text() for p in paths] == before


GOOD_CLASS = '''
class GoodCache:
    def can_terminate_prefetch(self, operation):
        can_terminate = True
        if self.prefetch_stop_policy == "best_effort":
            return can_terminate
        completed = bool(operation.hash_value) and operation.completed_tokens == len(operation.hash_value) * self.page_size
        if completed and operation.pool_transfers and not operation.pool_transfers_done:
            completed = False
        if self.prefetch_stop_policy == "wait_complete":
            can_terminate = completed
        elif self.prefetch_stop_policy == "timeout":
            can_terminate = completed or self.is_prefetch_timeout(operation)
        terminated = operation.is_terminated()
        states = torch.tensor([1 - int(can_terminate), int(terminated)], dtype=torch.int)
        torch.distributed.all_reduce(states, op=torch.distributed.ReduceOp.MAX, group=self.tp_group)
        return states[0].item() == 0 or states[1].item() == 1
'''
OUR_GUARD = (
    "        if completed and operation.pool_transfers and not operation.pool_transfers_done:\n"
    "            completed = False\n")
TWO_CLASSES = "\nimport torch\n\n" + GOOD_CLASS + "\n" + GOOD_CLASS.replace("GoodCache", "BadCache").replace(
    OUR_GUARD, "") + POOLED_TAIL


def test_one_defect_one_finding():
    assert found(lint_source(TWO_CLASSES)) == [("example.py", 24, "HC101", "BadCache.can_terminate_prefetch")]
    # the good class in upstream's shape instead: still one error; the warning is the good class's own
    upstream = TWO_CLASSES.replace(OUR_GUARD, "", 1).replace(
        "            can_terminate = completed or self.is_prefetch_timeout(operation)\n",
        "            can_terminate = completed or self.is_prefetch_timeout(operation)\n"
        "        if completed and operation.pool_transfers and not operation.pool_transfers_done:\n"
        "            can_terminate = False\n", 1)
    assert found(lint_source(upstream)) == [
        ("example.py", 15, "HC107", "GoodCache.can_terminate_prefetch"),
        ("example.py", 24, "HC101", "BadCache.can_terminate_prefetch"),
    ]


def test_spelling_sample_is_clean():
    result = lint_paths([Path(__file__).resolve().parent / "samples" / "spellings.py.txt"])
    assert result.errors == [] and found(result) == [] and result.methods == 5


def test_broken_variants(samples):
    result = lint_paths([samples / "broken_variants.py.txt"])
    assert result.errors == []
    assert found(result) == [
        ("broken_variants.py.txt", 39, "HC101", "NoGuardCache.can_terminate_prefetch"),
        ("broken_variants.py.txt", 79, "HC103", "GuardAfterReduceCache.can_terminate_prefetch"),
        ("broken_variants.py.txt", 99, "HC102", "VoteKeyedCache.can_terminate_prefetch"),
        ("broken_variants.py.txt", 123, "HC104", "UncappedTimeoutCache.can_terminate_prefetch"),
    ]
    drift = {f.method: f.message for f in result.findings if f.code == "HC104"}
    assert "'timeout-cap'" in drift["UncappedTimeoutCache.can_terminate_prefetch"]
    # the abstract base and the suppressed legacy class report nothing
    assert not any("PrefetchPolicyBase" in (f.method or "") or "Legacy" in (f.method or "")
                   for f in result.findings)


def test_all_samples_together(samples):
    result = lint_paths(sorted(samples.glob("**/*.py.txt")))
    assert result.errors == []
    assert result.files_parsed == 7  # the 0.5.2x sample too: the defaults know its ACK drain
    errors = sorted(f.code for f in result.findings if f.code != "HC107")
    assert errors == ["HC101", "HC101", "HC102", "HC103", "HC104", "HC104"]
    assert sum(f.code == "HC107" for f in result.findings) == 3
    uncapped = {f.method for f in result.findings if "'timeout-cap'" in f.message}
    assert uncapped == {"UncappedTimeoutCache.can_terminate_prefetch", "UnifiedRadixCache.can_terminate_prefetch"}


def test_directory_recursion_finds_py_copies(tmp_path):
    tree = tmp_path / "pkg" / "caches"
    tree.mkdir(parents=True)
    copy_set(AFTER_FIX, tree)
    (tree / "__init__.py").write_text("")
    (tmp_path / "pkg" / "__init__.py").write_text("")
    result = lint_paths([tmp_path / "pkg"], Config(root=tmp_path))
    assert result.errors == []
    assert result.files_seen == 5 and result.files_parsed == 3
    assert sorted((Path(f.path).name, f.code) for f in result.findings) == [
        ("hi_mamba_radix.py", "HC107"), ("hiradix_fixed.py", "HC107"),
        ("unified_radix.py", "HC104"), ("unified_radix.py", "HC107")]


def test_long_file_positions_point_into_the_file(samples):
    text = (samples / "broken_variants.py.txt").read_text().splitlines()
    broken = lint_paths([samples / "broken_variants.py.txt"])
    for finding in broken.findings:
        if finding.code in ("HC101", "HC102", "HC103"):
            line = text[finding.line - 1]
            assert line[finding.col - 1:].startswith(("def can_terminate_prefetch", "if "))


@pytest.mark.parametrize("name", ["hiradix_fixed.py.txt", "unified_radix.py.txt", "hi_mamba_radix.py.txt"])
def test_upstream_guard_positions(name):
    result = lint_paths([UPSTREAM / name])
    (warning,) = [f for f in result.findings if f.code == "HC107"]
    line = (UPSTREAM / name).read_text().splitlines()[warning.line - 1]
    assert line[warning.col - 1:].startswith("if ")
