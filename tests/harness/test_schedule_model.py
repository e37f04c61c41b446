"""The spec's schedule model: subtrees add up to the whole, IO orders differ where they should, bad input is one line."""

from __future__ import annotations

import pytest

from conformance.scenarios.catalogue import SCENARIOS, Scenario
from conformance.scenarios.schedule_model import (
    EXTRAS_WITH_EACH_BATCH,
    IO_ORDERS,
    KV_THEN_EXTRAS,
    ScheduleModel,
    adapter_io_order,
    expected_schedules,
    io_groups,
    suite_roots,
)
from spec.errors import ConfigError


@pytest.mark.parametrize("io_order", IO_ORDERS)
@pytest.mark.parametrize("extra_pools", [0, 1, 2])
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_the_suite_subtrees_add_up_to_the_scenario(name, extra_pools, io_order):
    scenario = SCENARIOS[name]
    model = ScheduleModel(scenario, extra_pools, io_order)
    roots = suite_roots(scenario)
    assert len(roots) > 1 and len(set(roots)) == len(roots)
    # The split is the same whatever the pools and order (collected once for every adapter).
    assert roots == model.roots(2)
    assert sum(model.count(root) for root in roots) == model.count() == expected_schedules(scenario, extra_pools, io_order)


def test_io_groups_of_each_order():
    assert io_groups(KV_THEN_EXTRAS, 3, 2) == (1, 1, 1, 2)
    assert io_groups(KV_THEN_EXTRAS, 2, 0) == (1, 1)
    assert io_groups(EXTRAS_WITH_EACH_BATCH, 3, 2) == (3, 3, 3)
    assert io_groups(EXTRAS_WITH_EACH_BATCH, 2, 0) == (1, 1)


def test_the_orders_agree_without_extra_pools_and_differ_with_them():
    abort = Scenario("m", "wait_complete", kv_batches=2, batch_pages=1, aborts=1)
    assert expected_schedules(abort, 0, KV_THEN_EXTRAS) == expected_schedules(abort, 0, EXTRAS_WITH_EACH_BATCH)
    # An abort parked on the first KV batch: kv_then_extras stops after it, the other order runs its extra pool too.
    assert expected_schedules(abort, 1, KV_THEN_EXTRAS) != expected_schedules(abort, 1, EXTRAS_WITH_EACH_BATCH)


def test_a_prefix_that_is_no_schedule_counts_nothing():
    model = ScheduleModel(SCENARIOS["best_effort/2batches"], 1)
    assert model.count(("check", "check")) == 0 and model.walk(("tick",)) is None


def test_an_undeclared_io_order_is_the_default_and_a_bad_one_is_one_line():
    class Plain:
        name = "plain"

    class Odd:
        name = "odd"
        io_order = "kv_last"

    assert adapter_io_order(Plain()) == KV_THEN_EXTRAS
    with pytest.raises(ConfigError) as err:
        adapter_io_order(Odd())
    message = str(err.value)
    assert "odd.io_order" in message and "'kv_last'" in message and "extras_with_each_batch" in message and "\n" not in message


def test_the_loader_rejects_a_bad_io_order_in_one_line():
    from caches.adapters import hiradix
    from conformance.implementations.loader import check_adapter

    class BadOrder:
        def __init__(self) -> None:
            inner = hiradix()
            self.name, self.capabilities, self.default_extra_pools = inner.name, inner.capabilities, inner.default_extra_pools
            self.io_order = "concurrent"

        def create(self, env):
            raise AssertionError("never created")

    with pytest.raises(ConfigError) as err:
        check_adapter(BadOrder(), "--cache-impl x:y")
    assert "--cache-impl x:y io_order" in str(err.value) and "'concurrent'" in str(err.value) and "\n" not in str(err.value)


def test_the_ack_drain_counts_its_deadline_from_the_first_check():
    scenario = SCENARIOS["timeout/2batches+tick"]
    vote, drain = ScheduleModel(scenario, 1, KV_THEN_EXTRAS), ScheduleModel(scenario, 1, KV_THEN_EXTRAS, "ack_drain")

    def finished(model, schedule):
        return model.walk(schedule)[1].finished

    # A tick before any check: past the vote per check's deadline, nothing on the drain's timer yet.
    assert finished(vote, ("tick", "check")) and not finished(drain, ("tick", "check"))
    # After the first check started the drain's timer, a tick ends the wait while KV is incomplete ...
    assert finished(drain, ("check", "tick", "check"))
    # ... and once KV has landed with the extra-pool transfer pending too: the spec cuts it on every profile (A1, D5).
    assert finished(drain, ("io", "io", "check", "tick", "check")) and finished(vote, ("io", "io", "check", "tick", "check"))
    assert expected_schedules(scenario, 1, KV_THEN_EXTRAS, profile="ack_drain") != expected_schedules(scenario, 1, KV_THEN_EXTRAS)


def test_a_wait_held_past_the_deadline_for_a_pending_extra_pool_is_the_divergence_not_a_bare_defect():
    scenario = SCENARIOS["timeout/2batches+tick"]
    model = ScheduleModel(scenario, 1, KV_THEN_EXTRAS)
    spec = model.schedules()
    # A cache that keeps waiting after KV landed, past the deadline, while the extra pool's get is pending:
    found = model.divergence([*spec, ("io", "io", "check", "tick", "check", "io", "check")])
    assert found is not None and found.startswith("D5: ") and found.endswith("(divergence landed-kv-waits)"), found
    # Still waiting while KV itself is incomplete is no divergence: a bare D5.
    early = model.divergence([*spec, ("check", "tick", "check", "io", "check")])
    assert early is not None and early.startswith("D5: ") and "divergence" not in early, early


def test_a_divergent_exploration_names_the_clause_of_its_first_difference():
    scenario = SCENARIOS["wait_complete/2batches"]
    model = ScheduleModel(scenario, 1, KV_THEN_EXTRAS)
    schedules = model.schedules()
    assert model.divergence(schedules) is None and len(schedules) == model.count()
    # A cache that terminated at a check while IO was pending (its vote broke the guard): that schedule ends early.
    early = [s for s in schedules if s[:2] != ("io", "check")] + [("io", "check", "io", "io")]
    assert model.divergence(early).startswith("D4: after 'io,check,io', 'check': the request had finished where the spec's decision keeps waiting")
    # A cache whose IO thread started a batch the spec's terminate stops.
    best = ScheduleModel(SCENARIOS["best_effort/2batches"], 1, KV_THEN_EXTRAS)
    extra = best.schedules() + [("check", "io", "io", "io", "io")]
    assert best.divergence(extra).startswith("F1: after 'check,io', 'io': an IO step started that the spec's model does not start")
