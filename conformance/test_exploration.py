"""Systematic exploration: every interleaving of IO steps and scheduler steps (conformance/explore.py).

Each scenario is one small prefetch (2 or 3 KV batches plus the adapter's
default extra pools) under one policy, with or without a timeout tick and an
abort. Every schedule runs on a fresh cache and must satisfy the spec's
invariants, load only stored bytes and leave exact slot accounting; the
number of schedules must equal what the spec's state machine predicts. A
failure names the schedule and the explore.replay(...) call reproducing it.
"""

from __future__ import annotations

import pytest

from conformance.explore import SCENARIOS, Scenario, expected_schedules, explore
from conformance.report import INTERLEAVINGS_KEY

# Checked on every schedule: invariants (S1-S3, S5, F3), bytes (S5), accounting (F8),
# IO after terminate changes the schedule count (F1), in-flight slots (F5).
COMMON_CLAUSES = ("S1", "S2", "S3", "S5", "F1", "F3", "F5", "F6", "F8")
POLICY_CLAUSES = {
    "best_effort": ("D1",),
    "wait_complete": ("D2", "D3", "D4", "L1"),
    "timeout": ("D2", "D3", "D5", "T2", "L2"),
}


def _param(scenario: Scenario):
    return pytest.param(scenario, id=scenario.name, marks=pytest.mark.clause(*COMMON_CLAUSES, *POLICY_CLAUSES[scenario.policy]))


@pytest.mark.parametrize("scenario", [_param(s) for s in SCENARIOS.values()])
def test_every_interleaving(impl, make_cache, scenario: Scenario, tmp_path, request):
    result = explore(make_cache, scenario, storage_dir=tmp_path / "explored")
    # The matrix summary prints one line of counts per implementation (and the JSON report carries them).
    request.node.user_properties.append((INTERLEAVINGS_KEY, result.count))
    want = expected_schedules(scenario, result.extra_pools)
    assert result.count == want, (
        f"explored {result.count} schedules; the spec's state machine with {scenario.kv_batches} KV batches and "
        f"{result.extra_pools} extra pools yields {want} (an IO started after terminate, a transfer without a gate "
        f"point, or a vote other than the spec's); schedules: {result.schedules[:10]}"
    )
