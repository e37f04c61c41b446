"""Cross-rank exploration: every way the ranks' local state can differ around their collectives, on real ranks.

The multi-rank scenarios of test_multirank.py are written by hand; here the
explorer (conformance/multirank/explore/) enumerates them. Each test explores
one scenario of its catalogue exhaustively on one launch of ranks kept alive
throughout: the IO each rank has landed when a check runs, each rank's clock,
one rank's storage fault, its storage missing a batch, its host tier with
less room, its own waiting-timeout abort; four ranks over two vote groups
each. Every schedule is judged by the multi-rank oracle (the spec's
invariants across ranks, the decisions, the commit, the bytes, the
accounting, the same usable prefix), and a failure names the clause, the
schedule and the command that replays it alone.
"""

from __future__ import annotations

import pytest

from conformance.multirank import cuda_devices_needed
from conformance.multirank.explore import SCENARIOS, explore
from conformance.multirank.explore.catalogue import SUITE

pytestmark = [
    pytest.mark.needs("multi_rank"),
    pytest.mark.io_order("kv_then_extras", "the explorer holds each rank's IO load by load: KV batches, then the extra-pool transfer"),
]

# What every schedule is judged on (conformance/multirank/checks.py), besides each family's own.
COMMON = ("X1", "X4", "L1", "L3", "L4", "S1", "S3", "S4", "S5", "F3", "F5", "F8", "F11", "R2")
FAMILIES = {
    "landed": ("F4", "F6", "F10", "D3", "X3"),
    "fault": ("F7", "L5"),
    "abort": ("X2",),
    "miss": (),
    "room": (),
    "groups": ("X2",),
}
MARKS = {
    "abort": [pytest.mark.precondition("rank_local_abort_clock")],
    "miss": [pytest.mark.precondition("rank_local_backups")],
    "room": [pytest.mark.precondition("rank_local_host_room")],
    "groups": [pytest.mark.needs("vote_groups")],
}
TIMED = ("L2", "D5", "T2")


def _params():
    for name in SUITE:
        scenario = SCENARIOS[name]
        family = name.split("/")[0]
        clauses = (*COMMON, *FAMILIES[family], *(TIMED if scenario.policy == "timeout" else ()))
        yield pytest.param(name, id=name, marks=[pytest.mark.clause(*clauses), *MARKS.get(family, [])])


def replay_source(harness, impl) -> list[str]:
    """The command-line options that build `impl` again, for the replay line of a failure (empty: none known)."""
    origin = next((o for a, o in zip(harness.adapters, harness.origins) if a.name == impl.name), None)
    if origin is None:
        return []
    if origin.source == "--sglang-live" and origin.value:
        return ["--sglang-live", origin.value, "--name", impl.name]
    return ["--cache-impl", origin.factory] if origin.factory else []


@pytest.mark.slow
@pytest.mark.parametrize("name", list(_params()))
def test_every_cross_rank_divergence(impl, device, harness, tmp_path, request, name):
    """Every schedule of the scenario passes; a failure names its clause, its schedule and the command replaying it."""
    if device not in ("cpu", "cuda:0"):
        pytest.skip(f"multi-rank CUDA runs use cuda:0..cuda:<world_size - 1> and run once, under cuda:0 (not {device})")
    scenario = SCENARIOS[name]
    if device != "cpu":
        reason = cuda_devices_needed(scenario.world_size)
        if reason:
            pytest.skip(reason)
    result = explore(impl, scenario, workdir=tmp_path, device="cpu" if device == "cpu" else "cuda",
                     source=replay_source(harness, impl), cli_specs=request.config.getoption("--cache-impl"))
    setups = len(scenario.setups(scenario.pools_for(impl)))
    assert result.explored >= setups, f"test setup: {result.explored} schedules explored for {setups} setups of {name}"
    assert result.naive >= result.classes >= result.explored or not result.classes, (
        f"the reduction's counts are inconsistent: {result.naive} naive, {result.classes} classes, {result.explored} explored")
