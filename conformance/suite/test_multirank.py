"""Multi-rank conformance: real rank processes over torch.distributed, rank-skewed IO.

Each test is one launch (processes fork from a server that imported torch
once, so a launch costs about 0.1 s after the first). Every scenario is also
held to scenario_problems(): the spec's invariants across ranks, the same
decision per step on every rank (X1), one vote collective per agreed id
(X2, X4), the same collectives (L3), the spec's commit (F3, S4), loaded bytes
equal stored bytes (S5), no slot or thread left. The same usable prefix on
every rank has a test of its own, so that its failures count under S4/F4 only.
"""

from __future__ import annotations

import pytest

from conformance.bounds import HANG_S
from conformance.multirank.scenarios import GROUP_LAYOUTS
from conformance.multirank import (
    REQUEST_PAGES,
    MultiRankError,
    Scenario,
    adapter_ref,
    cuda_devices_needed,
    expected_commit_pages,
    order_cases,
    run_or_fail,
    TriggerNotProduced,
)
from conformance.report.matrix import PROP_JUDGED_OUT
from spec.fence import HitPolicy
from spec.config import Policy
from spec.decision import VOTE_COLLECTIVE
from spec.groups import group_label, vote_group_kinds
from spec.profiles import VOTE_PROFILES, TimerStart
from spec.trace import EventKind
from spec.verdicts import Outcome


def page_size(outcome) -> int:
    """The page size the ranks ran at (the implementation's own)."""
    return outcome.ranks[0].configs[0].page_size


def full(outcome) -> int:
    """Tokens of every scenario's request."""
    return REQUEST_PAGES * page_size(outcome)

pytestmark = pytest.mark.needs("multi_rank")  # every implementation test here launches ranks


@pytest.fixture
def run_ranks(impl, device, tmp_path, request):
    """run_ranks(scenarios, world_size=2) -> one ScenarioOutcome per scenario (fails on any problem).

    On CUDA rank r uses cuda:r (nccl), so a run needs world_size visible GPUs
    and runs once, under the first GPU param.
    """
    if device not in ("cpu", "cuda:0"):
        pytest.skip(f"multi-rank CUDA runs use cuda:0..cuda:<world_size - 1> and run once, under cuda:0 (not {device})")
    ref = adapter_ref(impl, request.config.getoption("--cache-impl"))
    kind = "cpu" if device == "cpu" else "cuda"

    def run(scenarios, world_size=2, **checks):
        if kind == "cuda":
            reason = cuda_devices_needed(world_size)
            if reason:
                pytest.skip(reason)
        try:
            return run_or_fail(ref, scenarios, world_size=world_size, device=kind, workdir=tmp_path / f"{world_size}ranks",
                               hang_timeout_s=HANG_S, preload=[type(impl).__module__, *getattr(impl, "preload_modules", ())], **checks)
        except TriggerNotProduced as exc:
            request.node.user_properties.append((PROP_JUDGED_OUT, Outcome.NOT_JUDGED.value))
            pytest.skip(f"not judged on {impl.name}: {exc}")

    return run


def extra_pools(outcome) -> dict[str, HitPolicy]:
    return {name: HitPolicy(policy) for name, policy in outcome.ranks[0].pools.items() if name != "kv"}


def has_all_pages_extra(outcome) -> bool:
    return HitPolicy.ALL_PAGES in extra_pools(outcome).values()


WORLDS = [pytest.param(2, id="2ranks"), pytest.param(4, id="4ranks")]


@pytest.mark.io_order("kv_then_extras", "the multi-rank IO valve moves each rank through KV, then the extra-pool transfer")
@pytest.mark.clause("X1", "X2", "L1", "L3", "S4", "S5", "R2")
@pytest.mark.parametrize("world_size", WORLDS)
@pytest.mark.parametrize("policy", ["wait_complete", "timeout"])
def test_skewed_kv_progress_finishes_together(run_ranks, world_size, policy):
    """Rank r's KV completes at step r + 1: no rank finishes before the slowest, all finish with it.

    At step r the last rank's KV has arrived and its extra-pool transfer is
    held; without extra pools its IO is done there, a step earlier.
    """
    (outcome,) = run_ranks([Scenario("skewed_kv", {"policy": policy})], world_size)
    last = f"cache 0 check {world_size if extra_pools(outcome) else world_size - 1}"
    finished = outcome.finished_at("r1")
    assert finished == {rank: (last, full(outcome)) for rank in range(world_size)}, (
        f"L1/S4: every rank must finish r1 with all {full(outcome)} tokens at {last}, when the slowest rank's IO ended (got {finished})")


@pytest.mark.io_order("kv_then_extras", "the multi-rank IO valve moves each rank through KV, then the extra-pool transfer")
@pytest.mark.clause("X1", "L2", "L3", "S4", "F3", "F11", "F5", "R2")
@pytest.mark.parametrize("world_size", WORLDS)
def test_one_rank_not_timed_out_holds_the_others(run_ranks, world_size, profile):
    """timeout: rank 0 not past its deadline votes no while the others vote yes; then rank 0 completes."""
    (outcome,) = run_ranks([Scenario("one_rank_timed_out")], world_size)
    finished = outcome.finished_at("r1")
    # The vote per check: rank 0's no holds everyone at check 1, its completion ends the wait at check 2. The ACK drain:
    # check 1 starts its timer (start_wait), and at check 2 any rank past its deadline ends the wait for all (A2). The
    # drain vote: the timer ran from the start, and any rank's yes ends the wait for all at check 1 (R2).
    any_yes_ends = profile.decisions(Policy.TIMEOUT, [False] + [True] * (world_size - 1), [False] * world_size)[0]
    check = "cache 0 check 1" if any_yes_ends and profile.timer_start is TimerStart.OPERATION_START else "cache 0 check 2"
    assert all(f is not None for f in finished.values()) and {label for label, _ in finished.values()} == {check}, (
        f"L2/{profile.combine_clause}: every rank must end r1 at {check[8:]} (got {finished})")
    tokens = {t for _, t in finished.values()}
    assert len(tokens) == 1, f"S4: the ranks committed different lengths of r1: {finished}"
    # The slow ranks had loaded only part of KV and no extra pool: with an ALL_PAGES pool nothing is committable.
    want = expected_commit_pages(outcome, "r1") * page_size(outcome)
    assert tokens == {want} and want < full(outcome), f"F3/F11: the commit must be the fence's MIN over ranks ({want} tokens), got {tokens}"
    if has_all_pages_extra(outcome):
        assert want == 0, f"F3: with an ALL_PAGES pool still held on the slow ranks nothing is committable (the fence allows {want})"


@pytest.mark.io_order("kv_then_extras", "the multi-rank IO valve moves each rank through KV, then the extra-pool transfer")
@pytest.mark.clause("D3", "X3", "X1", "F3", "F11", "F4", "S1", "S4", "R2")
@pytest.mark.parametrize("world_size", WORLDS)
@pytest.mark.parametrize("policy", ["wait_complete", "timeout"])
@pytest.mark.needs("extra_pools")
def test_extra_pool_pending_on_one_rank(run_ranks, impl, world_size, policy, profile):
    """The last rank has KV but its extra-pool transfer is held; the other ranks are done."""
    (outcome,) = run_ranks([Scenario("extra_pool_pending_on_one_rank", {"policy": policy})], world_size)
    assert outcome.ranks[-1].notes["pending_extra"], "test setup: the last rank's extra-pool transfer was not held at the check"
    if profile.id not in VOTE_PROFILES:
        return  # the ACK drain waits for landed KV's sidecar by design (A1); scenario_problems judged what every profile owes
    finished = outcome.finished_at("r1")
    if policy == "wait_complete":
        # D3 before the reduce: the pending rank's no holds everyone; the next check commits everything.
        assert finished == {rank: ("cache 0 check 2", full(outcome)) for rank in range(world_size)}, (
            f"D3/X3: the pending rank's no holds every rank at check 1, and check 2 commits all {full(outcome)} tokens (got {finished})")
    else:
        # Everyone timed out: terminate at once; the held extra pool is excluded by the fence.
        want = 0 if has_all_pages_extra(outcome) else full(outcome)
        assert finished == {rank: ("cache 0 check 1", want) for rank in range(world_size)}, (
            f"L2/F3: every rank past its deadline ends r1 at check 1, committing {want} tokens (got {finished})")


def assert_aborted_on_one_rank(outcome, world_size: int, aborting: int) -> None:
    r1 = outcome.finished_at("r1")
    assert r1[aborting] is None, "X4: the aborting rank no longer tracks r1: it must not report it finished"
    assert {rank: r1[rank] for rank in range(aborting)} == {rank: ("cache 0 check 1", 0) for rank in range(aborting)}, (
        f"X4/S4: the ranks still tracking r1 must end it at the check where a peer dropped it, committing 0 (got {r1})")
    r2 = outcome.finished_at("r2")
    assert r2 == {rank: ("cache 0 check 2", full(outcome)) for rank in range(world_size)}, f"L1/S4: r2, checked in the same steps, must commit in full at check 2 (got {r2})"
    matches = [r.matches["r1"] for r in outcome.ranks]
    assert all(m == (0, 0) for m in matches), f"F8: an aborted r1 must leave nothing in the tree (matches {matches})"


@pytest.mark.precondition("abort_on_one_rank")
@pytest.mark.clause("X4", "X2", "L3", "S4", "F8", "R2")
@pytest.mark.parametrize("peers_level", ["partial", "done"])
@pytest.mark.parametrize("world_size", WORLDS)
def test_abort_on_one_rank_joins_untracked(run_ranks, world_size, peers_level):
    """One rank drops r1 while its peers still track it (the abort reached it alone); r2 shares every step with r1."""
    aborting = world_size - 1
    (outcome,) = run_ranks([Scenario("abort_on_one_rank", {"aborting_rank": aborting, "peers_level": peers_level})], world_size)
    assert_aborted_on_one_rank(outcome, world_size, aborting)


@pytest.mark.precondition("rank_local_abort_clock")
@pytest.mark.clause("X4", "X2", "L3", "S4", "F8", "R2")
@pytest.mark.parametrize("world_size", WORLDS)
def test_waiting_timeout_abort_on_one_rank(run_ranks, impl, harness, world_size):
    """The scheduler's waiting timeout, read from each rank's own clock, passes on one rank a step before its peers.

    That rank aborts r1 (releases its prefetch) while its peers still track it:
    the cache must stay in step with them, as for any abort on one rank.
    """
    aborting = world_size - 1
    scenario = Scenario("abort_on_one_rank", {"aborting_rank": aborting, "peers_level": "partial", "cause": "rank_local_clock"})
    try:
        (outcome,) = run_ranks([scenario], world_size)
    except MultiRankError as exc:
        cause = harness.declarations_of(impl).deployment.get("rank_local_abort_clock")
        where = "; ".join(cause[1]) if cause else "a deployment whose scheduler aborts on a rank-local clock"
        raise MultiRankError(f"{exc}\n(rank {aborting}'s own clock passed the waiting timeout first, so it alone aborted r1: {where})") from None
    assert_aborted_on_one_rank(outcome, world_size, aborting)


@pytest.mark.precondition("rank_local_backups")
@pytest.mark.clause("S4", "S5", "X1", "L3", "F3", "F11", "R2")
def test_storage_miss_on_one_rank_agrees_the_shorter_hit(run_ranks):
    """Rank 1's storage lacks the last two pages: the hit is the MIN, on both ranks."""
    (outcome,) = run_ranks([Scenario("storage_miss_on_one_rank", {"missing_rank": 1})])
    hits = {r.rank: [int(e.value) for e in r.traces[0].events if e.kind is EventKind.HIT and e.op == "r1"] for r in outcome.ranks}
    assert hits == {0: [2], 1: [2]}, f"S4: the hit must be the MIN over ranks (2 pages) on every rank, got {hits}"
    half = 2 * page_size(outcome)
    finished = outcome.finished_at("r1")
    assert finished == {0: ("cache 0 check 1", half), 1: ("cache 0 check 1", half)}, f"S4/F3: both ranks commit the 2 agreed pages at check 1 (got {finished})"
    loads = {r.rank: [(load.request_id, load.tokens) for load in r.loads] for r in outcome.ranks}
    assert loads == {0: [("r1", half)], 1: [("r1", half)]}, f"S4: both ranks serve the 2 agreed pages (got {loads})"


@pytest.mark.precondition("shared_storage_across_configs")
@pytest.mark.needs("subgroup_deployments")
@pytest.mark.clause("S6")
def test_pages_of_another_world_size_are_misses(run_ranks):
    """Four ranks store a request; as two deployments of two ranks each, over the same storage, they find a miss.

    Each rank of the writer and of the reader holds one shard of the same
    shape (2 KV heads: one per rank at world size 4 and at 2), so only the
    world size tells the shards apart: a reader that serves the writer's
    pages serves another deployment's shard as its own (S6).
    """
    (outcome,) = run_ranks([Scenario("pages_of_another_world_size", {"reader_world_size": 2})], 4)
    if not outcome.ranks[0].notes["sharded"]:
        pytest.skip("every pool is held whole by each rank: another world size's pages are the same bytes")
    served = {r.rank: r.notes["served"] for r in outcome.ranks}
    assert not any(served.values()), (
        f"S6: deployments of world size 2 served tokens (per rank: {served}) from pages a deployment of world size 4 "
        f"stored in the storage they share: another deployment's shards, of the same shape, read as their own")


@pytest.mark.clause("S4", "F3", "F11", "X1", "L1", "L3", "R2")
def test_load_failure_on_one_rank_agrees_the_shorter_commit(run_ranks):
    """Rank 1's second KV batch fails in storage: it trims its hit, and both ranks commit the MIN."""
    (outcome,) = run_ranks([Scenario("get_fails_on_one_rank", {"failing_rank": 1})])
    half = 2 * page_size(outcome)
    finished = outcome.finished_at("r1")
    assert finished == {0: ("cache 0 check 1", half), 1: ("cache 0 check 1", half)}, f"S4/F3: both ranks commit the MIN, 2 pages, at check 1 (got {finished})"
    failed = [e for e in outcome.ranks[1].traces[0].events if e.kind is EventKind.IO_END and e.op == "r1" and not e.value]
    assert failed, "the injected failure did not reach rank 1's load"


@pytest.mark.clause("X1", "F7", "S4", "L3", "L5", "R2")
@pytest.mark.parametrize("world_size", WORLDS)
def test_terminated_on_one_rank_ends_it_everywhere(run_ranks, world_size, profile):
    """The last rank's load fails while every rank still tracks r1 and the peers' loads are held.

    Under the vote per check the failing rank revokes r1 (terminated), and
    X1's other half, "any rank terminated", must reach every rank through the
    vote collective's payload at that check. Every profile: the ranks agree
    (S4), run the same collectives (L3), and the failure ends the transfer,
    not the IO thread (L5).
    """
    failing = world_size - 1
    (outcome,) = run_ranks([Scenario("terminated_on_one_rank", {"failing_rank": failing})], world_size)
    if profile.id not in VOTE_PROFILES:
        return  # how the ACK drain ends a failed load is its drain's business; scenario_problems judged what every profile owes
    terminated = [r.notes["terminated_before_check"] for r in outcome.ranks]
    assert terminated == [rank == failing for rank in range(world_size)], (
        f"F7: the failing rank must revoke r1 (marked terminated) after its failed load, and only it (terminated per rank: {terminated})")
    finished = outcome.finished_at("r1")
    assert finished == {rank: ("cache 0 check 1", 0) for rank in range(world_size)}, (
        f"X1: a rank that terminated r1 ends it on every rank at that check, committing 0 (got {finished})")


@pytest.mark.io_order("kv_then_extras", "the multi-rank IO valve moves each rank through KV, then the extra-pool transfer")
@pytest.mark.clause("X1", "X2", "F1", "F2", "F3", "F11", "F4", "F5", "F6", "S1", "S2", "S4", "S5", "L3", "R2")
@pytest.mark.parametrize("policy", ["timeout", "wait_complete", "best_effort"])
def test_cross_rank_orders_around_the_vote(run_ranks, policy):
    """Every combination of where each rank's IO is at its vote and at its terminate (2 ranks).

    timeout (both timed out): 6 x 6 cases, IO moving between vote and terminate
    (window 2) on one rank, both or neither; wait_complete and best_effort:
    3 x 3 cases. The commit of each is checked against the spec (F3, S4) by
    scenario_problems; here, what the case implies on its face.
    """
    cases = order_cases(policy, 2)
    (outcome,) = run_ranks([Scenario("orders", {"policy": policy, "cases": cases})])
    results = dict(outcome.ranks[0].notes["orders"])
    assert dict(outcome.ranks[1].notes["orders"]) == results, "S4: the ranks' commits differ for some case (scenario_problems lists which)"
    assert len(results) == len(cases), f"test setup: {len(results)} of {len(cases)} cases ran"
    all_pages = has_all_pages_extra(outcome)
    for case, tokens in results.items():
        at_terminate = [term for _, term in case]
        if policy == "wait_complete" or all(level == "done" for level in at_terminate):
            assert tokens == full(outcome), f"L1/F11: case {case}: every rank's IO was done, yet {tokens} of {full(outcome)} tokens were committed"
        elif "partial" in at_terminate or all_pages:
            # Some rank lacks KV pages, or an ALL_PAGES pool is still held: the MIN is short.
            assert tokens is None or tokens < full(outcome), f"F3: case {case}: {tokens} tokens committed although some rank lacked pages"
        if all_pages and any(level != "done" for level in at_terminate) and policy != "wait_complete":
            assert not tokens, f"F3: case {case}: {tokens} tokens committed while an ALL_PAGES pool was still held"


@pytest.mark.clause("S4", "F4", "F10")
def test_every_rank_serves_the_same_prefix_after_a_commit(run_ranks):
    """Same committed length, same usable prefix: a trailing state (F4) or window (F10) must not be kept on some ranks only.

    Cases where the ranks' extra pools end differently around terminate: one
    rank's extra pool held under timeout, and the best_effort orders (the
    timeout orders add window 2, but no new way for the ranks to differ here).
    """
    scenarios = [Scenario("extra_pool_pending_on_one_rank", {"policy": "timeout"}),
                 Scenario("orders", {"policy": "best_effort", "cases": order_cases("best_effort", 2)})]
    outcomes = run_ranks(scenarios, same_usable_prefix=True)
    loads = [load for outcome in outcomes for load in outcome.ranks[0].loads]
    assert loads, "no case committed anything to load back"


# --- several vote groups: four ranks as 2x2 (attn_tp pairs across attn_cp pairs) -----------------------

GRID = "2x2"


def grid_vote_groups(rank: int, rule: str) -> set[str]:
    """The labels of the groups `rank` reduces its votes over in the grid, under the class's rule (X2)."""
    mine = {kind: next(g for g in groups if rank in g) for kind, groups in GROUP_LAYOUTS[GRID].items()}
    return {group_label(kind, mine[kind]) for kind in vote_group_kinds({k: len(g) for k, g in mine.items()}, rule)}


CP_UNDER_DP_ATTENTION = "cp2_dp_attention"


@pytest.mark.precondition("attention_cp_with_dp_attention")
@pytest.mark.clause("S4", "X2", "L1", "L3")
@pytest.mark.needs("vote_groups")
@pytest.mark.parametrize("policy", ["wait_complete", "timeout"])
def test_context_parallel_ranks_finish_together_when_the_tp_group_is_one_rank(run_ranks, impl, require, policy):
    """Two ranks of one context-parallel pair, each its own tp group (DP attention hands the cache its attention TP
    group): they hold shards of one request, so their votes must meet on the pair's attention CP group.

    Rank r's KV completes at step r + 1. A vote reduced over the tp group alone is each rank's own: rank 0 finishes a
    step before rank 1, and the pair's shards of the request are used at different steps.
    """
    (skewed,) = run_ranks([Scenario("in_groups", {"layout": CP_UNDER_DP_ATTENTION, "inner": "skewed_kv", "policy": policy})], 2)
    last = f"cache 0 check {2 if extra_pools(skewed) else 1}"
    finished = skewed.finished_at("r1")
    if finished != {rank: (last, full(skewed)) for rank in range(2)}:
        votes = {r.rank: sorted({e.group or "its one group" for e in r.traces[0].events
                                 if e.kind is EventKind.COLLECTIVE and e.value == VOTE_COLLECTIVE}) or ["none"]
                 for r in skewed.ranks}
        pair = group_label("attn_cp", [0, 1])
        pytest.fail(
            f"S4: ranks 0 and 1 hold shards of one request (one attention context-parallel group, {pair}) and finished r1 "
            f"apart: {finished}; both must finish at {last}, when the slower rank's IO ended. Their votes ran on "
            f"{votes}, never on {pair}: with DP attention the cache's tp group is each rank alone, so a "
            f"vote over it alone reaches no peer (X2: each attention group larger than one rank)")


@pytest.mark.precondition("abort_on_one_rank")
@pytest.mark.clause("X2", "X4", "L3", "S4", "R2")
@pytest.mark.needs("vote_groups")
def test_2x2_groups_an_abort_on_one_rank(run_ranks, impl, require):
    """Four ranks reducing over two vote groups each: an abort on the last rank joins neutrally on both its groups."""
    (aborted,) = run_ranks([
        Scenario("in_groups", {"layout": GRID, "inner": "abort_on_one_rank", "aborting_rank": 3, "peers_level": "done"}),
    ], 4)
    r2 = aborted.finished_at("r2")
    assert r2 == {rank: ("cache 0 check 2", full(aborted)) for rank in range(4)}, f"L1/S4: r2 must commit in full at check 2 on every rank (got {r2})"
    matches = {r.rank: r.matches["r1"] for r in aborted.ranks}
    assert matches == {rank: (0, 0) for rank in range(4)}, f"F8: the aborted r1 must leave nothing in any rank's tree (matches {matches})"


@pytest.mark.clause("X1", "X2", "X4", "L3", "S4", "S5", "R2")
@pytest.mark.needs("vote_groups")
def test_2x2_groups_skewed_io(run_ranks, impl, require, harness):
    """One launch of four ranks whose caches reduce over two vote groups each, as upstream's attention groups do.

    Skewed KV: every rank finishes at the slowest rank's step. Every check runs
    one vote collective per group and id (X2, X4) and the ranks of each group
    run the same collectives on it (L3): scenario_problems() compares them group by group.
    """
    (skewed,) = run_ranks([Scenario("in_groups", {"layout": GRID, "inner": "skewed_kv", "policy": "wait_complete"})], 4)
    finished = skewed.finished_at("r1")
    assert finished == {rank: ("cache 0 check 4", full(skewed)) for rank in range(4)}, f"L1/S4: every rank must finish r1 at the slowest rank's step (got {finished})"
    declared = harness.declarations_of(impl)
    for r in skewed.ranks:
        votes = {e.group for e in r.traces[0].events if e.kind is EventKind.COLLECTIVE and e.value == VOTE_COLLECTIVE}
        expected = grid_vote_groups(r.rank, declared.vote_group_rule)
        assert votes == expected, (
            f"X2: rank {r.rank} reduced its votes over {sorted(votes)}; its class's rule ({declared.vote_group_rule}: "
            f"{'; '.join(declared.vote_group_evidence) or 'the spec default'}) reduces over {sorted(expected)}")
