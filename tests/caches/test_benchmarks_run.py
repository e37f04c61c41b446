"""The cache benchmarks still run and check their own bytes (no timing is asserted here)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


# swa: KV plus a sliding window of half the request, so both pools' bytes are counted (1.5 MiB).
MODES = [pytest.param("kv", 1, id="kv"), pytest.param("swa", 1.5, id="swa")]


@pytest.mark.parametrize("mode, mib", MODES)
def test_load_back_benchmark_runs_one_small_case(mode, mib):
    bench = load("bench_load_back")
    row = bench.run_case(bench.torch.device("cpu"), 1, repeats=1, mode=mode)  # raises if the loaded bytes differ
    assert row["mib"] == mib and row["load_back_ms"] > 0 and row["raw_ms"] > 0


@pytest.mark.parametrize("mode, mib", MODES)
def test_prefetch_benchmark_runs_one_small_case(tmp_path, mode, mib):
    bench = load("bench_prefetch")
    row = bench.run_case(tmp_path, 1, repeats=1, batch_pages=16, mode=mode)  # raises unless the whole request is committed
    assert row["mib"] == mib and row["prefetch_ms"] > 0 and row["raw1_ms"] > 0 and row["threads"] >= 1


@pytest.mark.parametrize("name", ["bench_load_back", "bench_prefetch"])
def test_sizes_that_do_not_fit_the_request_are_one_usage_error(name, capsys):
    bench = load(name)
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--mib", "0.001"])
    assert exit_info.value.code == 2 and "--mib" in capsys.readouterr().err
