"""The 0.5.2x shape: the check lives in the commit path, configured per implementation."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

SAMPLE = Path(__file__).resolve().parent / "samples" / "upstream_0_5_2x" / "unified_radix.py.txt"
COMMIT_ENTRY = ('{method = "unified.py::UnifiedRadixCache._can_terminate_prefetch", guard = "commit", '
                'commit = ["_handle_prefetch_result", "_drain_prefetch_acks"]}')
DECISION_ENTRY = '"unified.py::UnifiedRadixCache._can_terminate_prefetch"'

HANDLE_GATE = (
    "        if operation.pool_transfers_done:\n"
    "            sidecar_hits = {t.pool: t.host_indices[: t.completed_pages] for t in operation.pool_transfers}\n")
HANDLE_UNGATED = (
    "        sidecar_hits = {t.pool: t.host_indices[: t.completed_pages] for t in operation.pool_transfers}\n")
DRAIN_GATE = (
    "            if not done:\n"
    "                self.prefetch_acks.append(operation)  # its sidecar reads are still running\n"
    "                continue\n")


@pytest.fixture
def checkout(tmp_path: Path):
    def make(entry: str = COMMIT_ENTRY, text: str | None = None) -> Path:
        target = tmp_path / "unified.py"
        if text is None:
            shutil.copy(SAMPLE, target)
        else:
            target.write_text(text)
        (tmp_path / "pyproject.toml").write_text(f"[tool.hicache-lint]\nimplementations = [{entry}]\n")
        return tmp_path
    return make


def codes(proc) -> list[str]:
    return [line.split()[1] for line in proc.stdout.splitlines()]


def test_the_sample_is_clean_when_the_check_is_configured_in_the_commit_path(checkout, run_cli):
    for args in (["--repo"], ["unified.py"]):
        proc = run_cli(*args, cwd=checkout())
        assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", ""), args


def test_without_the_configuration_the_decision_method_is_judged_as_if_it_held_the_guard(checkout, run_cli):
    # configured as a plain decision method, the timeout-only vote has no guard: the
    # configuration is what makes the verdict true for this shape
    proc = run_cli("--repo", cwd=checkout(DECISION_ENTRY))
    assert codes(proc) == ["HC101"] and proc.returncode == 1
    # nothing configured: nothing named can_terminate_prefetch, nothing said
    plain = checkout()
    (plain / "pyproject.toml").unlink()
    assert run_cli("unified.py", cwd=plain).stdout == ""


def test_an_unguarded_sidecar_commit_is_reported_where_it_happens(checkout, run_cli):
    text = SAMPLE.read_text()
    assert HANDLE_GATE in text
    proc = run_cli("--repo", cwd=checkout(text=text.replace(HANDLE_GATE, HANDLE_UNGATED)))
    assert proc.returncode == 1
    (line,) = proc.stdout.splitlines()
    assert line.startswith("unified.py:63:")
    assert " HC108 UnifiedRadixCache._handle_prefetch_result commits or releases sidecar results " in line


def test_an_unguarded_release_in_the_drain_is_reported(checkout, run_cli):
    text = SAMPLE.read_text()
    assert DRAIN_GATE in text
    proc = run_cli("--repo", cwd=checkout(text=text.replace(DRAIN_GATE, "")))
    (line,) = proc.stdout.splitlines()
    assert " HC108 UnifiedRadixCache._drain_prefetch_acks " in line


def test_a_suppression_on_the_commit_method_silences_it(checkout, run_cli):
    text = SAMPLE.read_text().replace(HANDLE_GATE, HANDLE_UNGATED).replace(
        "    def _handle_prefetch_result(self, operation) -> None:\n",
        "    # hicache-lint: ignore[HC108] reason: sidecars here are read-only mirrors\n"
        "    def _handle_prefetch_result(self, operation) -> None:\n")
    proc = run_cli("--repo", cwd=checkout(text=text))
    assert (proc.returncode, proc.stdout) == (0, "")


def test_a_missing_commit_method_is_a_configuration_error(checkout, run_cli):
    entry = COMMIT_ENTRY.replace("_drain_prefetch_acks", "_drain_acks")
    proc = run_cli("--repo", cwd=checkout(entry))
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "unified.py: error: implementation 'unified.py::UnifiedRadixCache._can_terminate_prefetch': "
        "class UnifiedRadixCache has no commit method _drain_acks"]
