"""The cross-rank scenarios, by name: what the suite explores on every implementation declaring multi_rank.

Replay commands and reproduction scripts name a scenario from SCENARIOS, so a
name here is part of the suite's interface. Each family makes the ranks'
local state differ in one way (docs/suite.md, "Cross-rank exploration"):

- landed/<policy>: the IO each rank has landed at each check (and, under
  timeout, each rank's clock, and IO landing between a rank's vote and its
  terminate);
- fault/<policy>: one rank's t-th load fails in storage, every rank and t;
- abort/<policy>: one rank aborts on its own waiting-timeout clock;
- miss/<policy>: one rank's storage lacks the last KV batch (its backup failed);
- room/backup/<policy>, room/prefetch/<policy>: one rank's host tier has less
  room: a backup writes nothing there, or its prefetch takes fewer host slots;
- window/timeout: IO landing between a timed-out rank's vote and its terminate (window 2);
- groups/<policy>: four ranks reducing over two vote groups each (2x2), the IO each has landed.

Sizes: one KV batch of one page (two where the family needs a second) and the
adapter's first extra pool, two ranks, so that each explores exhaustively in
seconds (groups: four ranks, the fewest extra pools the adapter runs with, the
states at the first check); benchmarks/bench_crossrank.py measures the
larger ones (bench/...: two KV batches, the indexer, one fault or one abort).
"""

from __future__ import annotations

from conformance.multirank.explore.model import CrossRankScenario


def _catalogue() -> list[CrossRankScenario]:
    out = []
    one = {"sidecars": 1}  # the adapter's first extra pool: one sidecar, as a deployment's model has one
    for policy in ("wait_complete", "timeout", "best_effort"):
        timed = {"ticks": 1} if policy == "timeout" else {}
        # best_effort ends at the first check: two batches cost nothing more there.
        # Under timeout each rank's clock doubles its states: the fewest extra pools, two checks, then the finish
        # (window/timeout and bench/.../timeout explore the clocks with a sidecar).
        pools = {"sidecars": 0, "checks": 2} if policy == "timeout" else one
        out.append(CrossRankScenario(f"landed/{policy}", policy, kv_batches=2 if policy == "best_effort" else 1, **pools, **timed))
        out.append(CrossRankScenario(f"fault/{policy}", policy, kv_batches=1, faults=True, **one, **timed))
        # An abort ends the request's collectives on one rank whatever its pools: the fewest extra pools.
        out.append(CrossRankScenario(f"abort/{policy}", policy, kv_batches=1, aborts=1, sidecars=0, **timed))
        # What storage holds and what the host tier has room for differ before any IO: each rank's IO at the first
        # check, then the finish (landed/ explores the IO beyond).
        out.append(CrossRankScenario(f"miss/{policy}", policy, misses=True, checks=1, **one))  # two batches: one stored, one missing
        for kind in ("backup", "prefetch"):  # two pages: a prefetch can take one
            out.append(CrossRankScenario(f"room/{kind}/{policy}", policy, room=kind, checks=1, **one))
    out.append(CrossRankScenario("window/timeout", "timeout", kv_batches=1, ticks=1, window=True, **one))
    # Four ranks: the state at one check is 2 ** 4 combinations already; the fewest extra pools the adapter runs with.
    out.append(CrossRankScenario("groups/wait_complete", "wait_complete", world_size=4, layout="2x2", kv_batches=1, sidecars=0, checks=1))
    # The benchmark's: two KV batches, one sidecar pool, one fault or one abort.
    for policy in ("wait_complete", "timeout"):
        timed = {"ticks": 1} if policy == "timeout" else {}
        out.append(CrossRankScenario(f"bench/fault/{policy}", policy, extra_pools=("indexer",), faults=True, **timed))
        out.append(CrossRankScenario(f"bench/abort/{policy}", policy, extra_pools=("indexer",), aborts=1, **timed))
    return out


SCENARIOS: dict[str, CrossRankScenario] = {s.name: s for s in _catalogue()}

# What the suite explores on every implementation (conformance/suite/test_crossrank.py): each family once,
# under the policy where it decides most, sized for CI; the rest run from the command line and the benchmark.
SUITE = ("landed/wait_complete", "landed/timeout", "landed/best_effort", "fault/wait_complete", "abort/wait_complete",
         "miss/wait_complete", "room/backup/wait_complete", "room/prefetch/wait_complete", "groups/wait_complete")
