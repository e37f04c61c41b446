"""The benchmark's generated tree, linted by us at small scale (Fixit is not run here)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_lint", REPO / "benchmarks" / "bench_lint.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def test_generated_tree_is_valid_python_and_ours_finds_every_planted_gap(tmp_path):
    bench = load_bench()
    info = bench.generate_tree(tmp_path / "tree", files=80)
    assert info["files"] == 80 and info["lines"] > 80 * 100
    assert len(info["guardless"]) == 1  # caches 0..2; every third one lacks the guard
    compile_errors = []
    for path in (tmp_path / "tree").rglob("*.py"):
        try:
            compile(path.read_text(), str(path), "exec")
        except SyntaxError as exc:  # pragma: no cover - reported below
            compile_errors.append(f"{path}: {exc}")
    assert compile_errors == []
    assert bench.run_ours_api(tmp_path / "tree") == info["guardless"]
