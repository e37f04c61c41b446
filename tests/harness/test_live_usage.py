"""--sglang-live from the command line: bad trees and broken environments are one line, never a traceback.

Real pytest processes (the option imports the tree into the process, which
must not leak into this one).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
USAGE_ERROR = 4


def run_suite(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["CUDA_VISIBLE_DEVICES"] = ""
    command = [sys.executable, "-m", "pytest", "conformance/suite/test_smoke_roundtrip.py", "-q", "-p", "no:cacheprovider", *args]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def one_error_line(result: subprocess.CompletedProcess) -> str:
    output = result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == USAGE_ERROR, output
    assert len(lines) == 1 and lines[0].startswith("ERROR: "), output
    assert "Traceback" not in output, output
    return lines[0]


def test_a_tree_that_is_not_sglang_is_a_usage_error(tmp_path):
    line = one_error_line(run_suite("--sglang-live", str(tmp_path)))
    assert "--sglang-live" in line and str(tmp_path) in line and "python/sglang/__init__.py" in line


def test_a_tree_without_a_live_class_names_what_is_missing(tmp_path):
    (tmp_path / "sglang" / "srt" / "mem_cache").mkdir(parents=True)
    (tmp_path / "sglang" / "__init__.py").write_text("")
    line = one_error_line(run_suite("--sglang-live", str(tmp_path)))
    assert "HiRadixCache: sglang/srt/mem_cache/hiradix_cache.py does not exist" in line


@pytest.mark.parametrize("body, fragments", [
    ("import orjson_not_installed_here\nclass HiRadixCache:\n    pass\n", ("ModuleNotFoundError", "orjson_not_installed_here", ".ci/sglang-live-env")),
    ("raise RuntimeError('operator torchvision::nms does not exist')\nclass HiRadixCache:\n    pass\n", ("RuntimeError", "torchvision::nms")),
], ids=["missing-dependency", "import-raises"])
def test_a_tree_that_does_not_import_is_one_line(tmp_path, body, fragments):
    mem_cache = tmp_path / "python" / "sglang" / "srt" / "mem_cache"
    mem_cache.mkdir(parents=True)
    for package in (mem_cache.parents[1], mem_cache.parent, mem_cache):
        (package / "__init__.py").write_text("")
    (mem_cache / "hiradix_cache.py").write_text(body)
    line = one_error_line(run_suite("--sglang-live", str(tmp_path)))
    assert "sglang.srt.mem_cache.hiradix_cache" in line
    for fragment in fragments:
        assert fragment in line, line
