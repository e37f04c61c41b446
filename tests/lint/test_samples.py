"""Hand-written upstream-style modules that nobody here wrote the linter for."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lint.api import lint_paths
from lint.config import Config

UPSTREAM = ["hiradix_upstream.py.txt", "unified_upstream.py.txt", "hi_mamba_upstream.py.txt"]


def found(result) -> list[tuple[str, int, str, str]]:
    return [(Path(f.path).name, f.line, f.code, f.method or "") for f in result.findings]


@pytest.mark.parametrize("name", UPSTREAM + ["spellings.py.txt"])
def test_guarded_samples_alone_are_clean(samples, name):
    result = lint_paths([samples / name])
    assert result.errors == []
    assert found(result) == []
    assert result.methods >= 1


def test_upstream_trio_reports_the_uncapped_timeout_as_drift(samples):
    result = lint_paths([samples / n for n in UPSTREAM])
    assert result.errors == []
    assert found(result) == [
        ("unified_upstream.py.txt", 105, "HC104", "UnifiedRadixCache.can_terminate_prefetch"),
    ]
    (finding,) = result.findings
    assert "'timeout-cap'" in finding.message and "'uncapped'" in finding.message
    assert "majority (2 of 3)" in finding.message


def test_broken_variants(samples):
    result = lint_paths([samples / "broken_variants.py.txt"])
    assert result.errors == []
    assert found(result) == [
        ("broken_variants.py.txt", 39, "HC101", "NoGuardCache.can_terminate_prefetch"),
        ("broken_variants.py.txt", 39, "HC104", "NoGuardCache.can_terminate_prefetch"),
        ("broken_variants.py.txt", 79, "HC103", "GuardAfterReduceCache.can_terminate_prefetch"),
        ("broken_variants.py.txt", 79, "HC104", "GuardAfterReduceCache.can_terminate_prefetch"),
        ("broken_variants.py.txt", 99, "HC102", "VoteKeyedCache.can_terminate_prefetch"),
        ("broken_variants.py.txt", 99, "HC104", "VoteKeyedCache.can_terminate_prefetch"),
        ("broken_variants.py.txt", 123, "HC104", "UncappedTimeoutCache.can_terminate_prefetch"),
    ]
    drift = {f.method: f.message for f in result.findings if f.code == "HC104"}
    assert "'guard'" in drift["NoGuardCache.can_terminate_prefetch"]
    assert "'guard-placement'" in drift["GuardAfterReduceCache.can_terminate_prefetch"]
    assert "'guard-key'" in drift["VoteKeyedCache.can_terminate_prefetch"]
    assert "'timeout-cap'" in drift["UncappedTimeoutCache.can_terminate_prefetch"]
    # the abstract base and the suppressed legacy class report nothing
    assert not any("PrefetchPolicyBase" in (f.method or "") or "Legacy" in (f.method or "")
                   for f in result.findings)


def test_all_samples_together(samples):
    result = lint_paths(sorted(samples.glob("*.py.txt")))
    assert result.errors == []
    assert result.files_parsed == 5
    codes = sorted(f.code for f in result.findings)
    assert codes == ["HC101", "HC102", "HC103", "HC104", "HC104", "HC104", "HC104", "HC104"]
    uncapped = {f.method for f in result.findings if "'timeout-cap'" in f.message}
    assert uncapped == {"UncappedTimeoutCache.can_terminate_prefetch", "UnifiedRadixCache.can_terminate_prefetch"}


def test_directory_recursion_finds_py_copies(samples, tmp_path):
    tree = tmp_path / "pkg" / "caches"
    tree.mkdir(parents=True)
    for name in UPSTREAM:
        shutil.copy(samples / name, tree / name.replace(".py.txt", ".py"))
    (tree / "__init__.py").write_text("")
    (tmp_path / "pkg" / "__init__.py").write_text("")
    result = lint_paths([tmp_path / "pkg"], Config(root=tmp_path))
    assert result.errors == []
    assert result.files_seen == 5 and result.files_parsed == 3
    assert [(Path(f.path).name, f.code) for f in result.findings] == [("unified_upstream.py", "HC104")]


def test_long_file_positions_point_into_the_file(samples):
    result = lint_paths([samples / "hiradix_upstream.py.txt"], Config(disable=frozenset()))
    assert result.methods == 1
    text = (samples / "broken_variants.py.txt").read_text().splitlines()
    broken = lint_paths([samples / "broken_variants.py.txt"])
    for finding in broken.findings:
        if finding.code in ("HC101", "HC102", "HC103"):
            line = text[finding.line - 1]
            assert line[finding.col - 1:].startswith(("def can_terminate_prefetch", "if "))
