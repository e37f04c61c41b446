"""ADAPTERS.md's minimal adapter, run exactly as its section says: its module and its command, from a directory of its own.

The section is the source of truth: the module is its python block (the first
line names the file), the command its sh block. The module goes into a fresh
directory outside this checkout, and the command runs there as a newcomer
would type it, with this environment's pytest first on PATH and nothing of
this process's Python or pytest settings in the environment. Should the
module, the command or the harness drift apart, the run fails here.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import conformance

pytestmark = pytest.mark.slow  # the whole suite, in a subprocess

REPO = Path(__file__).resolve().parents[2]
DOC = Path(conformance.__file__).resolve().parent / "ADAPTERS.md"  # the copy the installed package ships
HEADING = "## A minimal adapter"
RUN_TIMEOUT_S = 600
# What the suite collects for a KV-only, one-rank adapter: 127 tests and 30 clauses passed when this was written.
MIN_PASSED = 100
MIN_PASSED_CLAUSES = 25


def section(text: str) -> str:
    assert HEADING in text, f"{DOC} has no section {HEADING!r}"
    start = text.index(HEADING) + len(HEADING)
    end = text.find("\n## ", start)
    return text[start : end if end != -1 else len(text)]


def fenced(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", text, re.MULTILINE | re.DOTALL)


def documented() -> tuple[str, str, str]:
    """(file name, module source, command) of the section."""
    text = section(DOC.read_text())
    code = fenced(text, "python")
    assert len(code) == 1, f"{HEADING}: expected one python block (the module), found {len(code)}"
    named = re.match(r"# (\w+\.py)\b", code[0])
    assert named, f"{HEADING}: the module's first line must name its file ('# name.py: ...'), not {code[0].splitlines()[0]!r}"
    commands = [line for block in fenced(text, "sh") for line in block.splitlines() if line.strip()]
    assert len(commands) == 1, f"{HEADING}: expected one command in sh blocks, found {commands}"
    return named.group(1), code[0], commands[0]


def adapter_name(path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    spec = importlib.util.spec_from_file_location(f"documented_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module.make_adapter().name


def test_the_documented_minimal_adapter_passes_the_suite_with_the_documented_command(tmp_path, monkeypatch):
    filename, code, command = documented()
    factory = f"{filename[:-3]}:make_adapter"
    assert f"--cache-impl {factory}" in command, f"{HEADING}: the command {command!r} does not name the module's factory {factory}"
    importlib.metadata.distribution("hicache-conformance")  # the command runs the installed suite (pip install -e .)
    bin_dir = Path(sys.executable).parent
    assert (bin_dir / "pytest").is_file(), f"no pytest script next to {sys.executable}: the command runs plain pytest"
    workdir = tmp_path / "their_project"
    workdir.mkdir()
    assert not workdir.resolve().is_relative_to(REPO), f"{workdir} lies inside this checkout"
    (workdir / filename).write_text(code)
    name = adapter_name(workdir / filename, monkeypatch)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHON"))}
    env["PATH"] = os.pathsep.join([str(bin_dir), env.get("PATH", "")])
    result = subprocess.run(command, shell=True, cwd=workdir, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    out = result.stdout + result.stderr
    assert result.returncode == 0, f"{command!r} exited {result.returncode}:\n{out[-6000:]}"
    summary = re.search(r"^(\d+) passed(.*) in [\d.]+s", out, re.MULTILINE)
    assert summary, f"no pytest summary in the output:\n{out[-3000:]}"
    assert int(summary.group(1)) >= MIN_PASSED, f"only {summary.group(1)} tests passed (expected at least {MIN_PASSED}):\n{out[-3000:]}"
    assert not re.search(r"failed|error|xpass", summary.group(2)), summary.group(0)
    row = re.search(rf"^{re.escape(name)}/cpu +(.*)$", out, re.MULTILINE)
    assert row, f"the matrix has no row {name}/cpu:\n{out[-3000:]}"
    cells = row.group(1).split()
    assert not set(cells) - {"P", "j", "n", "."}, f"the {name}/cpu row has cells other than pass, not judged, not applicable: {row.group(0)}"
    assert cells.count("P") >= MIN_PASSED_CLAUSES, f"only {cells.count('P')} clauses passed: {row.group(0)}"
