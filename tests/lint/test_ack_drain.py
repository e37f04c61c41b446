"""The 0.5.2x shape: the check lives in the commit path, configured per implementation."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

SAMPLE = Path(__file__).resolve().parent / "samples" / "upstream_0_5_2x" / "unified_radix.py.txt"
COMMIT_METHODS = '["_handle_prefetch_result", "_drain_storage_control_queues", "release_aborted_request"]'
SIDECARS = '["pool_transfers", "comp_xfers"]'


def commit_entry(extra: str = "") -> str:
    return ('{method = "unified.py::UnifiedRadixCache._can_terminate_prefetch", guard = "commit", '
            f'commit = {COMMIT_METHODS}, sidecar-fields = {SIDECARS}{extra}}}')


COMMIT_ENTRY = commit_entry()
DECISION_ENTRY = '{method = "unified.py::UnifiedRadixCache._can_terminate_prefetch", guard = "decision"}'

HANDLE_GATE = (
    "        if operation.pool_transfers_done:\n"
    "            sidecar_hits = {t.pool: t.host_indices[: t.completed_pages] for t in operation.pool_transfers}\n")
HANDLE_UNGATED = (
    "        sidecar_hits = {t.pool: t.host_indices[: t.completed_pages] for t in operation.pool_transfers}\n")
FINAL_ACK_RELEASE = "operation.pool_transfers if not operation.pool_transfers_done else None,"
FINAL_ACK_SIGNAL = "                if not ack.completed_req:\n                    continue\n"
ABORT_RELEASE = ("            [t for group in pending.comp_xfers.values() for t in group]\n"
                 "            if pending.operation.pool_transfers_done\n"
                 "            else None,\n")
ABORT_BEFORE_ALLOCATION = "        if pending.operation.host_indices is None:\n"
PARK_OR_RUN = "                if not allocate_hit(operation):\n                    self.parked_hits.append(operation)\n"
FINAL_ACK_CALL = (
    "                controller.release_host(\n"
    "                    operation.host_indices[operation.completed_tokens :],\n"
    "                    operation.pool_transfers if not operation.pool_transfers_done else None,\n"
    "                )\n")
POOL_ACK = ("                if ack.pool_hits is not None and current:\n"
            "                    operation.pool_hit_pages.update(ack.pool_hits)\n"
            "                    operation.pool_transfers_done = True\n")
ABORT_RETIRE = ("        completed_tokens = self.controller.terminate_prefetch(pending.operation)\n"
                "        self._retire(\n"
                "            request,\n"
                "            pending.host_indices[:completed_tokens],\n" + ABORT_RELEASE + "        )\n")
ABORT_CALL = (
    "        self._retire(\n"
    "            request,\n"
    "            pending.host_indices[:completed_tokens],\n" + ABORT_RELEASE + "        )\n")

# (what was removed or changed, old text, new text, line of the one finding, fragment of its message)
INVALID = [
    ("the commit inserts sidecar hits whatever the state of their reads", HANDLE_GATE, HANDLE_UNGATED, 70,
     "UnifiedRadixCache._handle_prefetch_result commits or releases sidecar results ('pool_transfers') outside"),
    ("the discard path (a helper called from an if condition) releases pending sidecars",
     "            transfers if operation.pool_transfers_done else None,\n", "            transfers,\n", 87,
     "UnifiedRadixCache._handle_prefetch_result (through _sidecars_cover, called at line 65) commits or releases sidecar results "
     "('pool_transfers') outside"),
    ("the abort releases comp_xfers whatever the state of their reads", ABORT_RELEASE,
     "            [t for group in pending.comp_xfers.values() for t in group],\n", 104,
     "UnifiedRadixCache.release_aborted_request commits or releases sidecar results ('comp_xfers') outside"),
    ("the final ACK (a nested function) releases the sidecar even when the commit owns it", FINAL_ACK_RELEASE,
     "operation.pool_transfers,", 165,
     "UnifiedRadixCache._drain_storage_control_queues (through drain_prefetch_acks, called at line 169) commits or releases "
     "sidecar results ('pool_transfers') at the final ACK without a pool_transfers_done check"),
    ("the drain releases pending sidecars before the final ACK", FINAL_ACK_SIGNAL, "", 163,
     "('pool_transfers') while pool transfers are pending and before their IO ended"),
    ("the abort revokes an operation whose hit was allocated", ABORT_BEFORE_ALLOCATION,
     "        if pending.operation.is_terminated():\n", 113,
     "UnifiedRadixCache.release_aborted_request (through revoke_pending_prefetch, called at line 98) commits or releases sidecar "
     "results ('comp_xfers') outside"),
    ("the drain sets the flag on every ACK, not only once the pool get's hits arrived", POOL_ACK,
     "                operation.pool_transfers_done = True\n"
     "                if ack.pool_hits is not None and current:\n"
     "                    operation.pool_hit_pages.update(ack.pool_hits)\n", 156,
     "UnifiedRadixCache._drain_storage_control_queues (through drain_prefetch_acks, called at line 169) sets "
     "pool_transfers_done to True where no test shows that every pool transfer has ended"),
    ("the drain sets the flag with the KV progress", POOL_ACK,
     "                if ack.completed_tokens is not None and current:\n"
     "                    operation.pool_transfers_done = True\n", 157, "sets pool_transfers_done to True"),
    ("the abort takes comp_xfers by unpacking the record, and releases it unchecked", ABORT_RETIRE,
     "        completed_tokens = self.controller.terminate_prefetch(pending.operation)\n"
     "        *_, comp_xfers = pending\n"
     "        self._retire(request, pending.host_indices[:completed_tokens],\n"
     "                     [t for group in comp_xfers.values() for t in group])\n", 103,
     "UnifiedRadixCache.release_aborted_request commits or releases sidecar results ('comp_xfers') outside"),
    ("the abort unpacks the record by position, and releases it unchecked", ABORT_RETIRE,
     "        completed_tokens = self.controller.terminate_prefetch(pending.operation)\n"
     "        operation, anchor, host_indices, comp_xfers = pending\n"
     "        self._retire(request, host_indices[:completed_tokens], [t for group in comp_xfers.values() for t in group])\n",
     102, "('comp_xfers') outside"),
    ("the drain revokes after the allocation started a read", PARK_OR_RUN,
     PARK_OR_RUN + "                elif operation.is_terminated():\n"
                   "                    self.revoke_pending_prefetch(operation.request)\n", 113,
     "UnifiedRadixCache._drain_storage_control_queues (through revoke_pending_prefetch, called at line 151)"),
]

VALID = [
    ("the abort unpacks the record and keeps the check", ABORT_RETIRE,
     "        completed_tokens = self.controller.terminate_prefetch(pending.operation)\n"
     "        *_, comp_xfers = pending\n"
     "        owned = [t for group in comp_xfers.values() for t in group]\n"
     "        self._retire(request, pending.host_indices[:completed_tokens],\n"
     "                     owned if pending.operation.pool_transfers_done else None)\n"),
    ("the flag is set once the pool hits are in, tested for truth", POOL_ACK,
     "                if ack.pool_hits and current:\n"
     "                    operation.pool_hit_pages.update(ack.pool_hits)\n"
     "                    setattr(operation, \"pool_transfers_done\", True)\n"),
    ("the final ACK's release as an if statement", FINAL_ACK_CALL,
     "                if not operation.pool_transfers_done:\n"
     "                    controller.release_host(operation.host_indices[operation.completed_tokens :],\n"
     "                                            operation.pool_transfers)\n"
     "                else:\n"
     "                    controller.release_host(operation.host_indices[operation.completed_tokens :], None)\n"),
    ("the abort returns early when the transfers are pending", ABORT_CALL,
     "        if not pending.operation.pool_transfers_done:\n"
     "            self._retire(request, pending.host_indices[:completed_tokens], None)\n"
     "            return\n"
     "        sidecars = [t for group in pending.comp_xfers.values() for t in group]\n"
     "        self._retire(request, pending.host_indices[:completed_tokens], sidecars)\n"),
    ("the drain revokes a parked hit before allocating it", PARK_OR_RUN,
     "                if operation.is_terminated():\n"
     "                    self.revoke_pending_prefetch(operation.request)\n"
     "                elif not allocate_hit(operation):\n"
     "                    self.parked_hits.append(operation)\n"),
]


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


def changed(old: str, new: str) -> str:
    text = SAMPLE.read_text()
    assert text.count(old) == 1, old
    return text.replace(old, new)


def test_the_sample_is_clean_when_the_check_is_configured_in_the_commit_path(checkout, run_cli):
    for args in (["--repo"], ["unified.py"]):
        proc = run_cli(*args, cwd=checkout())
        assert (proc.returncode, proc.stdout, proc.errors) == (0, "", ""), args


@pytest.mark.parametrize("case, old, new", VALID, ids=[v[0] for v in VALID])
def test_other_correct_spellings_are_clean(checkout, run_cli, case, old, new):
    proc = run_cli("--repo", cwd=checkout(text=changed(old, new)))
    assert (proc.returncode, proc.stdout, proc.errors) == (0, "", ""), case


@pytest.mark.parametrize("case, old, new, line, message", INVALID, ids=[v[0] for v in INVALID])
def test_each_unsafe_change_is_one_finding_at_its_line(checkout, run_cli, case, old, new, line, message):
    text = changed(old, new)
    proc = run_cli("--repo", cwd=checkout(text=text))
    assert proc.returncode == 1, (case, proc.stdout, proc.stderr)
    (finding,) = proc.stdout.splitlines()
    assert finding.startswith(f"unified.py:{line}:"), (case, finding)
    assert " HC108 " in finding and message in finding, (case, finding)


def test_the_final_ack_and_the_allocation_are_configured_names(checkout, run_cli):
    renamed = SAMPLE.read_text().replace("ack.completed_req", "ack.io_finished")
    assert (run_cli("--repo", cwd=checkout(commit_entry(', io-ended = ["io_finished"]'), renamed)).stdout == "")
    # under the default name the drain's release is no longer known to follow the final ACK
    proc = run_cli("--repo", cwd=checkout(text=renamed))
    (finding,) = proc.stdout.splitlines()
    assert finding.startswith("unified.py:165:") and "before their IO ended" in finding
    # with another allocation field, nothing shows that a revoke runs before the read
    proc = run_cli("--repo", cwd=checkout(commit_entry(', allocation-fields = ["kv_slots"]')))
    (finding,) = proc.stdout.splitlines()
    assert finding.startswith("unified.py:113:") and "(through revoke_pending_prefetch, called at line " in finding


def test_the_architecture_is_recognized_without_configuration(checkout, run_cli):
    # configured as a plain decision method, the timeout-only vote has no guard: the
    # configuration decides, and is what makes that verdict
    proc = run_cli("--repo", cwd=checkout(DECISION_ENTRY))
    assert codes(proc) == ["HC101"] and proc.returncode == 1
    # nothing configured: a decision that never reads completion, in a class with the
    # ACK drain's commit methods, is checked there (HC108), and the sample is clean
    plain = checkout()
    (plain / "pyproject.toml").unlink()
    proc = run_cli("unified.py", cwd=plain)
    assert (proc.returncode, proc.stdout, proc.errors) == (0, "", "")
    assert proc.summary.startswith("hicache-lint: 1 method checked in 1 of 1 file: 0 errors")
    ungated = changed(HANDLE_GATE, HANDLE_UNGATED)
    (plain / "unified.py").write_text(ungated)
    proc = run_cli("unified.py", cwd=plain)
    assert codes(proc) == ["HC108"] and proc.returncode == 1


def test_a_suppression_on_the_commit_method_silences_it(checkout, run_cli):
    text = changed(HANDLE_GATE, HANDLE_UNGATED).replace(
        "    def _handle_prefetch_result(self, operation) -> None:\n",
        "    # hicache-lint: ignore[HC108] reason: sidecars here are read-only mirrors\n"
        "    def _handle_prefetch_result(self, operation) -> None:\n")
    proc = run_cli("--repo", cwd=checkout(text=text))
    assert (proc.returncode, proc.stdout) == (0, "")


def test_a_missing_commit_method_is_a_configuration_error(checkout, run_cli):
    entry = COMMIT_ENTRY.replace("_drain_storage_control_queues", "_drain_queues")
    proc = run_cli("--repo", cwd=checkout(entry))
    assert proc.returncode == 2
    assert proc.errors.splitlines() == [
        "unified.py: error: implementation 'unified.py::UnifiedRadixCache._can_terminate_prefetch': "
        "class UnifiedRadixCache has no commit method _drain_queues"]
