"""Multi-rank scenarios: request data and the functions every rank runs (`ctx.rank` makes them rank-skewed).

A scenario runs the same scheduler steps, so the same collectives, on every
rank; only where each rank's IO stands at each step differs. SCENARIOS maps
the names a Scenario may carry to these functions.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch

from conformance.scenarios.workload import pool_data
from spec.clock import ManualClock
from spec.trace import BACKUP, LOAD, Event, EventKind, TraceRecorder

# A scenario runs on a rank with `ctx`, its RankContext, and `h`, a CacheHandle (conformance/multirank/rank.py);
# they are named here only in annotations, so that this module, which the rank imports, imports nothing of it back.
RankContext = CacheHandle = Any

REQUEST_PAGES = 4
BATCH_PAGES = 2  # KV arrives in two batches, so "partial" is a reachable level
LEVELS = ("partial", "kv", "done")  # how far a rank's IO for one prefetch has gone (see CacheHandle.to)


# --- data ----------------------------------------------------------------------------


def request_tokens(ctx: RankContext, seed: int, pages: int = REQUEST_PAGES) -> list[int]:
    """Token ids of a request of `pages` pages at the rank's page size (the implementation's own)."""
    import random

    rng = random.Random(seed)
    return [rng.randrange(1, 50_000) for _ in range(pages * ctx.page_size)]


def rank_data(handle: CacheHandle, length: int, seed: int, *, prefix: Mapping[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """Random bytes for every pool; each rank holds its own shard (different bytes per rank), or, for a pool every rank
    holds whole (rank_replicated), the same bytes on every rank.

    prefix: data of a shorter request this one extends (its token rows are reused).
    """
    pools = list(handle.cache.pools.values())
    whole = {p.name for p in pools if getattr(p, "rank_replicated", False)}  # an optional PoolLayout field
    sharded = pool_data([p for p in pools if p.name not in whole], length, torch.Generator().manual_seed(seed * 1009 + handle.ctx.rank))
    replicated = pool_data([p for p in pools if p.name in whole], length, torch.Generator().manual_seed(seed * 1009))
    data = {p.name: (replicated if p.name in whole else sharded)[p.name] for p in pools}
    for name, pool in handle.cache.pools.items():
        if prefix is not None and pool.unit != "state":
            data[name][: prefix[name].shape[0]] = prefix[name]
    return data


# --- scenarios (run on every rank; `ctx.rank` makes them rank-skewed) -----------------


def _finish(h: CacheHandle, requests: Mapping[str, tuple[Sequence[int], Mapping[int, Mapping[str, torch.Tensor]]]]) -> None:
    """Let every held IO go, then load back each finished request and compare bytes; match each aborted one."""
    h.ctx.phase("releasing IO")
    h.release_all_io()
    for op, (tokens, writes) in requests.items():
        if op in h.committed:
            h.load_and_compare(op, tokens, writes)
        h.ctx.result.matches[op] = tuple(h.cache.match(tokens))


def staggered_level(rank: int, step: int) -> str:
    """Rank r's IO reaches 'done' at step r + 1 (rank 0 fast, the last rank slowest)."""
    if step > rank:
        return "done"
    return "kv" if step == rank else "partial"


def scenario_skewed_kv(ctx: RankContext, policy: str) -> None:
    """Each rank's KV batches arrive at a different step: all ranks finish together, at the slowest."""
    h = ctx.cache(policy)
    tokens = request_tokens(ctx, 1)
    data = rank_data(h, len(tokens), 1)
    ctx.phase("storing")
    h.store(tokens, data)
    h.prefetch("r1", tokens)
    # The number of checks is fixed by the scenario, never by a rank-local result.
    for step in range(1, ctx.world_size + 1):
        ctx.phase(f"step {step}: IO to {staggered_level(ctx.rank, step)}")
        h.to("r1", staggered_level(ctx.rank, step))
        h.check(["r1"])
    _finish(h, {"r1": (tokens, {len(tokens): data})})


def scenario_one_rank_timed_out(ctx: RankContext) -> None:
    """timeout: rank 0 is never past its deadline, the others are.

    Step 1: every rank's KV partial: rank 0 votes no, so nobody terminates.
    Step 2: rank 0 done (votes yes, completed), the others still partial and
    timed out: everyone terminates; the commit is the MIN over ranks.
    """
    h = ctx.cache("timeout")
    tokens = request_tokens(ctx, 2)
    data = rank_data(h, len(tokens), 2)
    h.store(tokens, data)
    h.prefetch("r1", tokens)
    h.start_wait(["r1"])
    if ctx.rank != 0:
        h.time_out()
    h.to("r1", "partial")
    h.check(["r1"])
    if ctx.rank == 0:
        h.to("r1", "done")
    h.check(["r1"])
    _finish(h, {"r1": (tokens, {len(tokens): data})})


def scenario_extra_pool_pending_on_one_rank(ctx: RankContext, policy: str) -> None:
    """The last rank's KV is complete but its extra-pool transfer is pending; the others are done.

    wait_complete: the pending rank votes no (D3, before the reduce: X3), so
    nobody terminates until its extra pool ends. timeout (everyone timed out):
    everyone terminates at once, and the fence clamps the commit (F3, F4).
    """
    h = ctx.cache(policy)
    tokens = request_tokens(ctx, 3)
    data = rank_data(h, len(tokens), 3)
    h.store(tokens, data)
    h.prefetch("r1", tokens)
    slow = ctx.rank == ctx.world_size - 1
    if policy == "timeout":
        h.start_wait(["r1"])
        h.time_out()
    h.to("r1", "kv" if slow else "done")
    ctx.result.notes["pending_extra"] = slow and not h.trace.view("r1").io_done
    h.check(["r1"])
    if policy == "wait_complete":
        h.to("r1", "done")
        h.check(["r1"])
    _finish(h, {"r1": (tokens, {len(tokens): data})})


# A waiting timeout (seconds) the scheduler aborts a request after, read from each rank's own clock.
WAITING_TIMEOUT_S = 30.0


def scenario_abort_on_one_rank(ctx: RankContext, aborting_rank: int, peers_level: str, cause: str = "delivered") -> None:
    """One rank aborts r1 (release) while the others track it: the agreed list still names r1.

    cause "delivered": the abort reached that rank alone; "rank_local_clock":
    that rank's own clock passed the scheduler's waiting timeout first (its
    clock moves, its peers' do not). The aborting rank joins r1's collectives
    neutrally (X4: [0, 1] then 0 pages), so the others terminate it at that
    step and commit 0 (S4); r2, checked in the same steps, is untouched and
    commits in full once loaded.
    """
    h = ctx.cache("wait_complete")
    t1, t2 = request_tokens(ctx, 4), request_tokens(ctx, 5)
    d1, d2 = rank_data(h, len(t1), 4), rank_data(h, len(t2), 5)
    h.store(t1, d1)
    h.store(t2, d2)
    h.prefetch("r1", t1)
    h.prefetch("r2", t2)
    if ctx.rank == aborting_rank:
        if cause == "rank_local_clock":
            h.clock.advance(WAITING_TIMEOUT_S + 1.0)
        h.abort("r1")
    else:
        h.to("r1", peers_level)
    h.check(["r1", "r2"])
    h.valve.release("r1")  # whatever r1 still holds goes: those loads end and free their slots
    h.wait(lambda: h.trace.view("r1").io_done, "IO of the dropped r1 ending", clause="L4")
    h.settle("r2")
    h.to("r2", "done")
    h.check(["r2"])
    _finish(h, {"r1": (t1, {len(t1): d1}), "r2": (t2, {len(t2): d2})})


def scenario_storage_miss_on_one_rank(ctx: RankContext, missing_rank: int) -> None:
    """missing_rank's storage lacks the last two pages (their backup failed there): the hit is the MIN.

    Every rank writes A (2 pages) and B = A + 2 pages; on missing_rank the
    backup of B's tail fails. The hit query agrees on 2 pages (hit MIN) and
    every rank commits 2 pages, with A's bytes and A's state.
    """
    h = ctx.cache("wait_complete")
    tb = request_tokens(ctx, 6)
    ta = tb[: len(tb) // 2]
    da = rank_data(h, len(ta), 6)
    db = rank_data(h, len(tb), 7, prefix=da)
    h.store(ta, da)
    if ctx.rank == missing_rank:
        # Every backup of B fails there (A's pages are in storage already): a cache may back B up in
        # several parts (a window pool splits it at the window's start), each one storage write.
        h.valve.fail("backup of B's tail", lambda e: e.kind is EventKind.IO_START and e.value == BACKUP, times=REQUEST_PAGES)
    h.store(tb, db)
    h.prefetch("r1", tb)
    h.to("r1", "done")
    h.check(["r1"])
    _finish(h, {"r1": (tb, {len(ta): da, len(tb): db})})


def scenario_get_fails_on_one_rank(ctx: RankContext, failing_rank: int) -> None:
    """failing_rank's second KV batch fails in storage (it trims its hit): the commit is the MIN."""
    h = ctx.cache("wait_complete")
    tokens = request_tokens(ctx, 8)
    data = rank_data(h, len(tokens), 8)
    h.store(tokens, data)
    if ctx.rank == failing_rank:
        seen: list[int] = []

        def second_kv_load(e: Event) -> bool:
            if e.kind is EventKind.IO_START and e.value == LOAD and e.pool == "kv" and e.op == "r1":
                seen.append(e.io)
            return len(seen) == 2 and e.io == seen[1]

        h.valve.fail("second KV batch of r1", second_kv_load)
    h.prefetch("r1", tokens)
    h.to("r1", "done")
    h.check(["r1"])
    _finish(h, {"r1": (tokens, {len(tokens): data})})


def scenario_terminated_on_one_rank(ctx: RankContext, failing_rank: int) -> None:
    """failing_rank's first KV load fails in storage: it revokes r1 (terminated) while r1 is still tracked and checked.

    The peers' loads are held after their first batch, so each peer votes no.
    The combine must still end r1 on every rank at that check (X1: any rank
    terminated), and every rank commits 0 (a revoke commits nothing).
    """
    h = ctx.cache("wait_complete")
    tokens = request_tokens(ctx, 10)
    data = rank_data(h, len(tokens), 10)
    h.store(tokens, data)
    if ctx.rank == failing_rank:
        h.valve.fail("first KV batch of r1", lambda e: e.kind is EventKind.IO_START and e.value == LOAD and e.op == "r1")
    h.prefetch("r1", tokens)
    if ctx.rank == failing_rank:
        view = h.trace.view("r1")
        # Revoked (the vote per check) or completed short (the ACK drain): its IO thread starts nothing more for r1.
        h.wait(lambda: view.io_done, "the IO of r1 ending after its failed load", clause="L5")
    else:
        h.to("r1", "partial")
    ctx.result.notes["terminated_before_check"] = h.trace.view("r1").terminated
    h.check(["r1"])
    _finish(h, {"r1": (tokens, {len(tokens): data})})


ORDER_PAIRS = [(vote, term) for vote, term in itertools.product(LEVELS, LEVELS) if LEVELS.index(term) >= LEVELS.index(vote)]


def scenario_pages_of_another_world_size(ctx: RankContext, reader_world_size: int) -> None:
    """A deployment of another tensor-parallel size finds this one's pages in the storage both are given.

    Every rank of the launch stores a request as one deployment; then the
    ranks, split into deployments of reader_world_size, each look the same
    tokens up in the same storage. A model with 2 KV heads stores one head
    per rank at world size 2 and at 4 (at 4, ranks 0 and 1 both hold head 0;
    at 2, rank 1 holds head 1): pages of the same length and other bytes.
    The readers stored nothing, so every token they serve is another
    deployment's shard (S6). Notes: "served" (tokens), "sharded" (whether
    some pool is per-rank: a pool every rank holds whole is the same bytes at
    any world size, and not judged).
    """
    import torch.distributed as dist

    if ctx.world_size % reader_world_size or reader_world_size == ctx.world_size:
        raise ValueError(f"readers of world size {reader_world_size} must split the launch's {ctx.world_size} ranks into several deployments")
    shared = Path(ctx.plan.workdir) / f"scenario{ctx.index}" / "shared-storage"
    writer = ctx.cache("wait_complete", storage_dir=shared)
    tokens = request_tokens(ctx, 12)
    writer.store(tokens, rank_data(writer, len(tokens), 12))
    # Every rank creates every reader group (new_group is collective); each joins its own.
    groups = [dist.new_group(list(range(start, start + reader_world_size)))
              for start in range(0, ctx.world_size, reader_world_size)]
    reader = ctx.cache("wait_complete", storage_dir=shared, rank=ctx.rank % reader_world_size, world_size=reader_world_size,
                       process_group=groups[ctx.rank // reader_world_size])
    ctx.result.notes["sharded"] = any(not getattr(pool, "rank_replicated", False) for pool in reader.cache.pools.values())
    served = 0
    if reader.prefetch("r1", tokens):
        reader.to("r1", "done")
        reader.check(["r1"])
        served = reader.cache.load_back(tokens).tokens
    ctx.result.notes["served"] = served


def order_cases(policy: str, world_size: int) -> list[tuple[tuple[str, str], ...]]:
    """Every per-rank combination of (IO level at the vote, IO level at terminate).

    timeout (every rank timed out): IO may move between a rank's vote and its
    terminate (window 2). wait_complete and best_effort: nothing moves in between.
    """
    pairs = ORDER_PAIRS if policy == "timeout" else [(level, level) for level in LEVELS]
    return list(itertools.product(pairs, repeat=world_size))


def scenario_orders(ctx: RankContext, policy: str, cases: Sequence[tuple[tuple[str, str], ...]]) -> None:
    """Systematic cross-rank orders: one prefetch per case, in one cache, the same stored request.

    Each rank's IO is at case[rank][0] when it votes and at case[rank][1] when
    it terminates. The commit must match the spec's MIN over ranks (checked by
    the parent from IO facts), and the loaded bytes the stored ones.
    """
    h = ctx.cache(policy)
    tokens = request_tokens(ctx, 9)
    data = rank_data(h, len(tokens), 9)
    h.store(tokens, data)
    outcomes = []
    for index, case in enumerate(cases):
        # The id says, per rank, where its IO was at the vote and at terminate.
        op = f"o{index}:" + ",".join(f"r{rank}={vote}>{term}" for rank, (vote, term) in enumerate(case))
        vote_level, terminate_level = case[ctx.rank]
        ctx.phase(f"case {index} {case}")
        h.prefetch(op, tokens)
        if policy == "timeout":
            h.start_wait([op])
            h.time_out()
        h.to(op, vote_level)
        if terminate_level != vote_level:
            h.between_vote_and_terminate(op, terminate_level)
        finished = h.check([op])
        if policy == "wait_complete" and any(c[0] != "done" for c in case):
            h.to(op, "done")  # a second check, on every rank (the case is known to all)
            later = h.check([op])
            # A prefetch whose IO was complete at "kv" (no extra pool) may have finished at the first check; the
            # second then checks an id already committed, as a scheduler may for a peer's sake: the first commit counts.
            finished = finished if op in finished else later
        h.release_all_io()
        h.wait(lambda: h.trace.view(op).io_done, f"IO of {op} ending", clause="L4")
        if finished.get(op):
            h.load_and_compare(op, tokens, {len(tokens): data})
        outcomes.append((case, finished.get(op)))
        h.cache.evict_all()
    ctx.result.notes["orders"] = outcomes


def scenario_skip_collective(ctx: RankContext, hung_rank: int) -> None:
    """Harness self-test, no cache: only hung_rank enters a collective, so it hangs there."""
    import torch.distributed as dist

    trace = TraceRecorder(ManualClock(0.0), rank=ctx.rank)
    ctx.heartbeat.trace = trace
    ctx.phase("all_reduce on one rank only")
    if ctx.rank == hung_rank:
        trace.record(EventKind.COLLECTIVE, value="vote_max", op="r1", step=1)
        dist.all_reduce(torch.zeros(2, dtype=torch.int64))


def scenario_raise_on_rank(ctx: RankContext, failing_rank: int) -> None:
    """Harness self-test, no cache: one rank's scenario raises."""
    ctx.phase("about to fail")
    if ctx.rank == failing_rank:
        raise RuntimeError("deliberate failure")


# Rank layouts as several vote groups (spec/groups.py): kind -> the partition of the global ranks.
GROUP_LAYOUTS: dict[str, dict[str, list[list[int]]]] = {
    # Four ranks as 2x2: attention tensor-parallel pairs {0,1} {2,3} across context-parallel pairs {0,2} {1,3}.
    "2x2": {"tp": [[0, 1, 2, 3]], "attn_tp": [[0, 1], [2, 3]], "attn_cp": [[0, 2], [1, 3]]},
    # Two ranks of one data-parallel attention replica, one context-parallel pair: with DP attention the scheduler
    # hands each cache its attention TP group as its tp group, here each rank alone (precondition
    # attention_cp_with_dp_attention).
    "cp2_dp_attention": {"tp": [[0], [1]], "attn_tp": [[0], [1]], "attn_cp": [[0, 1]]},
}


def scenario_in_groups(ctx: RankContext, layout: str, inner: str, **params: Any) -> None:
    """Scenario `inner` with every cache reducing over the vote groups of `layout` instead of one group.

    The checks are the inner scenario's; across ranks, collectives are compared per group (L3).
    """
    ranks = sum(len(group) for group in GROUP_LAYOUTS[layout]["tp"])
    if ctx.world_size != ranks:
        raise ValueError(f"layout {layout} needs {ranks} ranks, not {ctx.world_size}")
    ctx.process_groups = GROUP_LAYOUTS[layout]
    SCENARIOS[inner](ctx, **params)


SCENARIOS: dict[str, Callable[..., None]] = {
    "skewed_kv": scenario_skewed_kv,
    "one_rank_timed_out": scenario_one_rank_timed_out,
    "extra_pool_pending_on_one_rank": scenario_extra_pool_pending_on_one_rank,
    "abort_on_one_rank": scenario_abort_on_one_rank,
    "storage_miss_on_one_rank": scenario_storage_miss_on_one_rank,
    "get_fails_on_one_rank": scenario_get_fails_on_one_rank,
    "terminated_on_one_rank": scenario_terminated_on_one_rank,
    "orders": scenario_orders,
    "pages_of_another_world_size": scenario_pages_of_another_world_size,
    "skip_collective": scenario_skip_collective,
    "raise_on_rank": scenario_raise_on_rank,
    "in_groups": scenario_in_groups,
}
