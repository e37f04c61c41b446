"""Systematic exploration: every interleaving of IO steps and scheduler steps (conformance/scenarios/explore.py).

Each scenario is one small prefetch (2 or 3 KV batches plus the adapter's
default extra pools) under one policy, with or without a timeout tick and an
abort. Every schedule runs on a fresh cache and must satisfy the spec's
invariants, load only stored bytes and leave exact slot accounting; the
number of schedules must equal what the spec's state machine predicts
(conformance/scenarios/schedule_model.py, for the adapter's declared IO order). Each
scenario runs as several items, one per subtree of schedules sharing their
first actions, so that xdist spreads it; the counts add up to the scenario's.
A failure names the schedule and the explore.replay(...) call reproducing it.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from conformance.scenarios.catalogue import SCENARIOS, Scenario

from conformance.scenarios.explore import explore, format_schedule, parse_schedule
from conformance.scenarios.schedule_model import ScheduleModel, adapter_io_order, suite_roots
from conformance.report.matrix import INTERLEAVINGS_KEY

# Checked on every schedule: invariants (S1-S3, S5, F3), bytes (S5), accounting (F8),
# IO after terminate changes the schedule count (F1), in-flight slots (F5).
COMMON_CLAUSES = ("S1", "S2", "S3", "S5", "F1", "F3", "F5", "F6", "F8")
POLICY_CLAUSES = {
    "best_effort": ("D1", "A1", "R1"),
    "wait_complete": ("D2", "D3", "D4", "L1", "A1", "R1"),
    "timeout": ("D2", "D3", "D5", "T2", "L2", "A1", "A2", "A3", "R1", "R2"),
}


def _params():
    # One item per subtree (schedule_model.suite_roots), so that xdist spreads a scenario over its workers.
    for scenario in SCENARIOS.values():
        marks = pytest.mark.clause(*COMMON_CLAUSES, *POLICY_CLAUSES[scenario.policy])
        for root in suite_roots(scenario):
            yield pytest.param(scenario, root, id=f"{scenario.name}/{format_schedule(root)}", marks=marks)


@pytest.mark.parametrize("scenario,root", list(_params()))
def test_every_interleaving(impl, make_cache, scenario: Scenario, root: tuple[str, ...], tmp_path, request, profile, page_size):
    scenario = replace(scenario, page_size=page_size)  # the implementation's own page size
    io_order = adapter_io_order(impl)
    result = explore(make_cache, scenario, storage_dir=tmp_path / "explored", root=root, io_order=io_order, profile=profile.id)
    # The matrix summary prints one line of counts per implementation, summed over the subtrees (and the JSON report carries them).
    request.node.user_properties.append((INTERLEAVINGS_KEY, result.count))
    model = ScheduleModel(scenario, result.extra_pools, io_order, profile)
    want = model.count(root)
    if result.count != want:
        why = model.divergence([parse_schedule(s) for s in result.schedules], root)
        assert why is None, f"{why} (explored {result.count} schedules beginning '{format_schedule(root)}'; the model yields {want})"
    assert result.count == want, (
        f"explored {result.count} schedules beginning '{format_schedule(root)}'; the spec's state machine with "
        f"{scenario.kv_batches} KV batches, {result.extra_pools} extra pools and IO order {io_order!r} yields {want} "
        f"(an IO started after terminate, a transfer without a gate point, an IO order other than the declared one, "
        f"or a vote other than the spec's); schedules: {result.schedules[:10]}"
    )
