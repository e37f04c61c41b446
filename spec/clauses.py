"""The clause catalogue: every rule of the spec with a stable ID.

The conformance harness and the linter cite these IDs. An ID never changes
meaning; a retired rule keeps its ID out of use.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from spec.errors import ConfigError


class Stance(str, Enum):
    KEEPS = "keeps"  # upstream does this already; the spec pins it down
    CORRECTS = "corrects"  # upstream does otherwise (or leaves a window open)
    ADDS = "adds"  # upstream has no rule here


@dataclass(frozen=True)
class Clause:
    id: str
    group: str
    title: str
    statement: str
    rationale: str
    stance: Stance
    upstream: str


GROUPS = {
    "C": "Configuration",
    "D": "Decision (local vote)",
    "T": "Timeout",
    "X": "Cross-rank combine",
    "F": "Fence (what may be inserted)",
    "S": "Safety invariants over the trace",
    "L": "Liveness invariants over the trace",
}

_CLAUSES = [
    Clause("C1", "C", "Unknown policy rejected",
           "A termination policy other than best_effort, wait_complete or timeout is rejected where it is configured, with one error naming the field, the value and the accepted values.",
           "A typo must not silently change safety behaviour.",
           Stance.CORRECTS, "Upstream votes yes for an unknown policy string at every check."),
    Clause("C2", "C", "Numeric fields validated",
           "page_size is an integer > 0; timeout_base_s > 0, timeout_per_ki_token_s >= 0 and timeout_max_s > 0 are finite; timeout_max_s >= timeout_base_s; unknown fields are rejected.",
           "A zero page size or a negative timeout makes every later rule meaningless.",
           Stance.ADDS, "Upstream reads these from server arguments without validation."),
    Clause("D1", "D", "best_effort votes yes at once",
           "Under best_effort the vote is yes at every check, with no cross-rank step; the fence still applies (F6).",
           "best_effort trades hit length for latency; it never waits.",
           Stance.KEEPS, "Upstream returns True before any other logic."),
    Clause("D2", "D", "Completion needs a hit",
           "An operation is complete only when it expects at least one page (its hit query ran) and completed_tokens == hit_pages * page_size.",
           "Before the hit query runs there is nothing to wait for yet, and nothing has been loaded.",
           Stance.KEEPS, "Upstream treats an empty hash list as not completed."),
    Clause("D3", "D", "Extra-pool guard, keyed on completion",
           "Under wait_complete and timeout, completion is false while the operation has pool transfers that are not done. The guard sets the completion predicate (not the vote), before the cross-rank reduce, so every rank's vote includes it.",
           "Declaring a prefetch complete while an extra pool (an indexer, a mamba state) is still being written let load_back copy half-written pages: garbled output.",
           Stance.KEEPS, "The upstream fix; it landed in the three cache classes in three separate changes, with windows where some lacked it."),
    Clause("D4", "D", "wait_complete votes completion",
           "Under wait_complete the vote is the completion predicate (D2, D3).",
           "wait_complete promises the whole hit or nothing.",
           Stance.KEEPS, "Same as upstream."),
    Clause("D5", "D", "timeout votes completion or timed out",
           "Under timeout the vote is completion (D2, D3) or timed out (T2).",
           "A slow storage tier must not stall the scheduler forever.",
           Stance.KEEPS, "Same as upstream."),
    Clause("T1", "T", "Timeout budget",
           "budget = min(timeout_max_s, timeout_base_s + timeout_per_ki_token_s * tokens / 1024), tokens = hit pages * page size; defaults 2.0 s, 0.1 s, 30 s.",
           "Longer hits may take longer, but never unboundedly.",
           Stance.CORRECTS, "One upstream class omits the max cap (a drift between implementations)."),
    Clause("T2", "T", "Timed out strictly after the budget",
           "An operation is timed out iff (now - start) > budget on the injected monotonic clock; at exactly the deadline it is not.",
           "A stated boundary lets every implementation and test agree to the tick.",
           Stance.KEEPS, "Upstream compares with > on time.monotonic()."),
    Clause("X1", "X", "Combine: all yes or any terminated",
           "An operation terminates iff every rank votes yes or any rank has already terminated it.",
           "Ranks must insert the same prefix; a rank that already stopped cannot resume.",
           Stance.KEEPS, "Upstream: one MAX all-reduce of [1 - can_terminate, terminated]."),
    Clause("X2", "X", "One vote collective per check",
           "Under wait_complete and timeout each check runs exactly one MAX all-reduce of [1 - vote, terminated] per operation on every rank; under best_effort none.",
           "The number of collectives must not depend on rank-local state (L3).",
           Stance.KEEPS, "Same as upstream (one class reduces only when the world size is > 1)."),
    Clause("X3", "X", "Guard before the reduce",
           "The extra-pool guard (D3) enters the vote before the collective, never after it.",
           "Applied after the reduce, one rank may stop while its peers keep waiting: different decisions and different inserted lengths.",
           Stance.KEEPS, "The upstream fix places it before; a refactor could move it."),
    Clause("X4", "X", "Collective shape agreed",
           "Each scheduler step checks an agreed, ordered list of request ids; a rank that no longer tracks a request still joins its collectives, voting [0, 1] (terminated) and committing 0 pages.",
           "Collectives inside loops whose trip count is rank-local, or an early return on one rank, hang the whole group.",
           Stance.CORRECTS, "Upstream has checked progress inside rank-local loops and returned early for untracked requests (production hangs)."),
    Clause("F1", "F", "Terminate stops IO",
           "Marking an operation terminated happens under its lock; after it no IO for the operation starts in any pool (increment refuses; the IO thread re-checks before every batch and before the extra-pool transfer).",
           "IO that starts after the commit writes into slots the tree may already serve.",
           Stance.KEEPS, "Upstream's increment refuses once terminated, but the extra-pool get is not re-checked."),
    Clause("F2", "F", "Atomic progress snapshot",
           "The progress used to commit (KV completed pages, every pool's completed pages, IO in flight) is read under the operation's lock, atomically with the terminate mark; the scheduler never reads progress fields without that lock.",
           "A vote that saw 'not complete, timed out' followed by a terminate that reads a later progress inserts pages whose extra pools are still being written.",
           Stance.CORRECTS, "Upstream reads progress fields without the lock (windows 2 and 5)."),
    Clause("F3", "F", "Commit clamped to every ALL_PAGES pool",
           "Committed pages = MIN across ranks of min(KV completed pages, completed pages of every ALL_PAGES pool); a slot enters the tree only after a successful load into it has ended.",
           "KV paired with stale or missing index pages produces garbage silently.",
           Stance.CORRECTS, "Upstream commits the KV prefix even when the extra get was skipped or came back shorter (windows 2, 3; failure class 6)."),
    Clause("F4", "F", "Trailing state attached only for its length, on every rank",
           "A TRAILING_PAGES state (mamba) is attached only if every rank loaded it for exactly the committed length (agreed in the commit collective); otherwise it is dropped and its slot freed.",
           "A recurrent state belongs to one prefix length; any other length is wrong state, and a state on some ranks only makes ranks serve different prefixes.",
           Stance.KEEPS, "The upstream mamba class attaches the state only when its transfer hit."),
    Clause("F5", "F", "In-flight IO excluded, freed at its end",
           "A slot with IO in flight at terminate is neither inserted nor freed; it is freed by whoever ends that IO.",
           "Freeing it lets the allocator hand it out while the old copy still writes into it.",
           Stance.ADDS, "Upstream does not distinguish in-flight slots at terminate."),
    Clause("F6", "F", "The fence applies under every policy",
           "best_effort, wait_complete and timeout all commit through the same fence (F1 to F5).",
           "The decision is a policy question; the fence is a safety question that no policy may skip.",
           Stance.CORRECTS, "Upstream best_effort returns before the guard and inserts whatever completed_tokens says (window 1)."),
    Clause("F7", "F", "Revoke terminates",
           "A revoked operation is marked terminated and done under its lock, no IO starts after, and every slot is freed once its IO ended.",
           "A revoked operation left unterminated can still start IO into slots that were freed.",
           Stance.CORRECTS, "Upstream never marks a revoked operation terminated and leaves its done flag false (window 4)."),
    Clause("F8", "F", "Every path returns every slot",
           "Commit, revoke, abort and error paths all return every slot and clear the operation from the ongoing map and the rate limit; a hit is reported only for data actually committed.",
           "A dropped operation leaks host slots forever and can wedge the prefetch rate limit.",
           Stance.CORRECTS, "Upstream error paths leaked slots and reported hits for unregistered prefetches (failure class 9)."),
    Clause("F9", "F", "No free under a pending copy",
           "A slot is freed only when no copy into or out of it is pending, including slots an insert's de-duplication releases.",
           "Reusing a slot that a queued copy still writes corrupts KV.",
           Stance.CORRECTS, "Upstream's insert de-duplication freed slots a queued load was writing (failure class 8)."),
    Clause("S1", "S", "No exposure of slots under IO",
           "No slot is inserted or loaded back while IO into it is in flight, or while the operation that owns it may still start IO (is not terminated).",
           "This is the garbled-output bug, stated as a trace property.",
           Stance.CORRECTS, "Violated upstream through windows 1, 2 and 5."),
    Clause("S2", "S", "No IO after terminate",
           "No IO of an operation starts after its terminate or revoke event.",
           "Terminate is the point after which the tree may serve the slots.",
           Stance.CORRECTS, "Violated upstream by the extra-pool get (window 2) and revoked operations (window 4)."),
    Clause("S3", "S", "Slots end exactly once",
           "Every slot allocated to an operation ends exactly once, inserted into the tree or freed, and is never freed while IO into or out of it is in flight.",
           "Double frees and leaks both corrupt the allocator; a free under IO corrupts data.",
           Stance.ADDS, "Upstream has leaked slots on error paths and freed slots under a pending copy."),
    Clause("S4", "S", "Same commit on every rank",
           "Every rank commits the same length for an operation (a revoke commits 0).",
           "Ranks hold shards of the same KV; different lengths pair shards of different prefixes.",
           Stance.KEEPS, "Upstream MIN-reduces completed tokens across ranks."),
    Clause("S5", "S", "Loaded bytes are stored bytes",
           "Bytes loaded back to the device equal the bytes stored for the same page key, in every pool.",
           "The end-to-end property users care about.",
           Stance.KEEPS, "The property the upstream bug broke."),
    Clause("L1", "L", "wait_complete ends once IO ends",
           "Under wait_complete an operation terminates at the first check after its IO ended on every rank, and commits the whole agreed hit when every IO succeeded.",
           "Waiting must end, and must be worth it.",
           Stance.KEEPS, "Same as upstream, with IO failure trimming the hit so waiting ends."),
    Clause("L2", "L", "timeout ends within its bound",
           "Under timeout a rank past its deadline votes yes, and a check at which every rank is past the deadline terminates the operation; IO in flight then is excluded by the fence (so the insert lags the bound by at most the IO batch in flight).",
           "The timeout policy's promise.",
           Stance.KEEPS, "Same as upstream."),
    Clause("L3", "L", "Same collectives on every rank",
           "Per scheduler step, and per operation outside steps, every rank runs the same collectives in the same order.",
           "Otherwise the group hangs.",
           Stance.CORRECTS, "Upstream has hung on rank-local collective counts (failure class 7)."),
]

CATALOGUE: dict[str, Clause] = {c.id: c for c in _CLAUSES}

# Trace checker names that are not clause IDs map to the clauses they check.
CHECKER_CLAUSES = {"D": ("D1", "D2", "D3", "D4", "D5")}


def clause(clause_id: str) -> Clause:
    try:
        return CATALOGUE[clause_id]
    except KeyError:
        raise ConfigError("clause", clause_id, "one of " + ", ".join(CATALOGUE)) from None


@dataclass(frozen=True)
class OpenWindow:
    """A way upstream can still go wrong, and the clauses that close it here."""

    id: str
    title: str
    upstream: str
    closed_by: tuple[str, ...]
    how: str


WINDOWS = [
    OpenWindow("W1", "best_effort skips the guard",
               "best_effort returns before the guard: a prefetch whose KV just completed is inserted while the extra-pool get is still running.",
               ("F6", "F3", "F5", "S1"),
               "The fence, not the decision, decides what is inserted: ALL_PAGES pools clamp the commit to their completed pages, and slots still being written are excluded and freed when their IO ends."),
    OpenWindow("W2", "IO moves between vote and terminate",
               "Under timeout the vote sees 'not completed, timed out'; the IO thread then finishes KV and starts the extra get; terminate reads the full completed_tokens and inserts it all. A peer that already terminated forces the same.",
               ("F1", "F2", "F3", "F5"),
               "Terminate marks the operation and snapshots progress under one lock; the extra get re-checks the mark before it starts; the commit counts only finished pages of every pool."),
    OpenWindow("W3", "Partial prefetch with an ALL_PAGES pool",
               "A partial prefetch skips the extra get but still inserts the KV prefix, pairing it with stale index data in those host slots.",
               ("F3",),
               "The commit is clamped to the ALL_PAGES pools' completed pages; a slot enters the tree only after a successful load into it."),
    OpenWindow("W4", "Revoked operation never terminated",
               "A revoked prefetch is never marked terminated and its done flag stays false.",
               ("F7", "S2"),
               "Revoke goes through terminate: marked, done, no IO after, every slot freed once its IO ended."),
    OpenWindow("W5", "Unlocked progress reads",
               "The scheduler reads the progress fields without the lock.",
               ("F2",),
               "Every read of progress the scheduler acts on is a snapshot under the operation's lock."),
    OpenWindow("P6", "Sidecar shorter than KV",
               "An ALL_PAGES side pool evicted in storage between the existence check and the get comes back shorter than KV; the full KV prefix is committed with stale index pages.",
               ("F3", "S5"),
               "Committed pages are clamped to the shortest ALL_PAGES pool hit."),
    OpenWindow("P7", "Collective count mismatch",
               "Progress is checked inside loops with rank-local trip counts, or a rank that no longer tracks a request returns early: ranks issue different collectives and the group hangs.",
               ("X4", "X2", "L3"),
               "One check per step over an agreed list of request ids, with neutral contributions for untracked requests."),
    OpenWindow("P8", "Insert frees slots under an in-flight copy",
               "An insert's de-duplication freed slots that a queued copy was writing; reuse corrupted KV.",
               ("F9", "S3"),
               "A slot is freed only when no copy into or out of it is pending."),
    OpenWindow("P9", "Leaks and phantom hits",
               "An operation dropped on an error path leaks host slots and the rate limit; an unregistered prefetch reports a storage hit.",
               ("F8", "S3"),
               "Every path returns every slot; a hit is reported only for committed data."),
]
