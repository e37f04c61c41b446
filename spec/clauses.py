"""The clause catalogue: every rule of the spec with a stable ID.

The conformance harness and the linter cite these IDs. An ID never changes
meaning; a retired rule keeps its ID out of use.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum

from spec.errors import ConfigError
from spec.fence_lock import FENCED_SECTIONS
from spec.kinds import Kind
from spec.profiles import ACK_DRAIN, DRAIN_VOTE, FENCED_VOTE, PROFILES, VOTE_PROFILES


class Stance(str, Enum):
    KEEPS = "keeps"  # upstream does this already; the spec pins it down
    CORRECTS = "corrects"  # upstream does otherwise (or leaves a window open)
    ADDS = "adds"  # upstream has no rule here


@dataclass(frozen=True)
class Clause:
    """One rule. `upstream` states what upstream's code does, as a fact; `evidence`
    says where to read it (commit, file and method, PR or issue number); `requires`
    names the clauses without which this one would be unsafe or meaningless."""

    id: str
    group: str
    title: str
    statement: str
    rationale: str
    stance: Stance
    upstream: str
    evidence: tuple[str, ...]
    requires: tuple[str, ...] = ()
    kind: Kind = Kind.SAFETY
    # The architecture profiles (spec/profiles.py) the clause judges; empty: every profile.
    profiles: tuple[str, ...] = ()

    def applies_to(self, profile_id: str) -> bool:
        return not self.profiles or profile_id in self.profiles


GROUPS = {
    "C": "Configuration",
    "D": "Decision (local vote)",
    "T": "Timeout",
    "X": "Cross-rank combine",
    "F": "Fence (what may be inserted)",
    "S": "Safety invariants over the trace",
    "L": "Liveness invariants over the trace",
    "A": "ACK drain (the 0.5.2x architecture's own mechanism)",
    "R": "Drain vote (the 0.5.19/0.5.20 architecture's own mechanism)",
}

# Where the upstream evidence lives. Paths are under python/sglang/srt/ of SGLang;
# "9e9fde147" is the commit the upstream notes were read at (all three classes
# carry the extra-pool guard there); PR and issue numbers are sgl-project/sglang's.
HIRADIX = "9e9fde147 mem_cache/hiradix_cache.py"
UNIFIED = "9e9fde147 mem_cache/unified_radix_cache.py"
HI_MAMBA = "9e9fde147 mem_cache/hi_mamba_radix_cache.py"
HYBRID_CONTROLLER = "9e9fde147 mem_cache/hybrid_cache/hybrid_cache_controller.py"
CONTROLLER = "9e9fde147 managers/cache_controller.py"
SWA_COMPONENT = "9e9fde147 mem_cache/unified_cache_components/swa_component.py"
GUARD_COMMITS = (
    "PR #26881 (736263f3d): the guard enters UnifiedRadixCache",
    "PR #27366 (faa628694): the guard enters HiMambaRadixCache",
    "PR #27550 (991689fd0): the guard enters HiRadixCache",
)

_CLAUSES = [
    Clause("C1", "C", "Unknown policy rejected",
           "A termination policy other than best_effort, wait_complete or timeout is rejected where it is configured, with one error naming the field, the value and the accepted values.",
           "A typo must not silently change safety behaviour.",
           Stance.CORRECTS,
           "The server's command line accepts only the three policies, but the cache classes take any string: a policy set in code reaches can_terminate_prefetch, whose last branch votes yes ('unknown prefetch stop policy, just return True') at every check.",
           ("9e9fde147 server_args.py: --hicache-storage-prefetch-policy choices",
            f"{HIRADIX}: HiRadixCache.can_terminate_prefetch, `else: return True`",
            f"{UNIFIED}, {HI_MAMBA}: the same `else: return True`")),
    Clause("C2", "C", "Numeric fields validated",
           "page_size is an integer > 0; timeout_base_s > 0, timeout_per_ki_token_s >= 0 and timeout_max_s > 0 are finite; timeout_max_s >= timeout_base_s; unknown fields are rejected.",
           "A zero page size or a negative timeout makes every later rule meaningless.",
           Stance.ADDS,
           "The storage extra config is checked for type only: prefetch_timeout_base, _per_ki_token and _max must be numbers, with no range check and no max >= base check.",
           (f"{HIRADIX}: HiRadixCache.parse_storage_backend_extra_config (isinstance checks only)",)),
    Clause("D1", "D", "best_effort votes yes at once",
           "Under best_effort the vote is yes at every check, with no cross-rank step; the fence still applies (F6).",
           "best_effort trades hit length for latency; it never waits.",
           Stance.KEEPS,
           "All three classes return True for best_effort before any other logic and before the reduce.",
           (f"{HIRADIX}, {UNIFIED}, {HI_MAMBA}: can_terminate_prefetch, first branch",)),
    Clause("D2", "D", "Completion needs a hit",
           "An operation is complete only when it expects at least one page (its hit query ran) and completed_tokens == hit_pages * page_size.",
           "Before the hit query runs there is nothing to wait for yet, and nothing has been loaded.",
           Stance.KEEPS,
           "All three classes set completed = False for an empty hash_value, else completed_tokens == len(hash_value) * page_size.",
           (f"{HIRADIX}, {UNIFIED}, {HI_MAMBA}: can_terminate_prefetch, `if len(operation.hash_value) == 0`",)),
    Clause("D3", "D", "Extra-pool guard, keyed on completion",
           "Under wait_complete and timeout, completion is false while the operation has pool transfers that are not done. The guard sets the completion predicate (not the vote), before the cross-rank reduce, so every rank's vote includes it, and under timeout a rank past its deadline still votes yes (D5).",
           "Declaring a prefetch complete while an extra pool (an indexer, a mamba state) is still being written let load_back copy half-written pages: garbled output. Keying the guard on completion rather than on the vote keeps the timeout able to end the wait when a pool transfer never returns.",
           Stance.CORRECTS,
           "Upstream's guard is `if completed and <pool transfers pending>: can_terminate = False`, after the policy branches and before the reduce: conditioned on completion, but it forces the vote. That is safe (nothing is inserted while a pool transfer runs) but unbounded: under timeout it vetoes 'timed out', so with KV complete and a sidecar read that never returns the wait never ends (named in PR #31668; issue #35012, whose open fix PR #35181 moves the guard onto completion, as here). This form is safe only together with the fence, which upstream's commit path does not have: terminate stops the pool get (F1), the commit is clamped to every ALL_PAGES pool's completed pages (F3), a trailing state is attached only for the length it was loaded for (F4), and slots with IO in flight are freed only when that IO ends (F5). Without them, moving upstream's guard onto completion would reopen the race PR #27550 closed. Before the guard (hiradix until 991689fd0), KV completion alone was completion: unsafe.",
           (*GUARD_COMMITS,
            f"{HIRADIX}: HiRadixCache.can_terminate_prefetch, guard after the policy branches, `can_terminate = False`",
            "991689fd0~1 mem_cache/hiradix_cache.py: HiRadixCache.can_terminate_prefetch has no guard",
            "PR #31668, issue #35012, PR #35181 (open): the hang under timeout and its proposed fix"),
           ("F1", "F3", "F4", "F5")),
    Clause("D4", "D", "wait_complete votes completion",
           "Under wait_complete the vote is the completion predicate (D2, D3).",
           "wait_complete promises the whole hit or nothing.",
           Stance.KEEPS,
           "can_terminate = completed; the vote-forcing guard then gives the same vote as D3 here (no while a pool transfer is pending), so the two guard forms agree under wait_complete.",
           (f"{HIRADIX}, {UNIFIED}, {HI_MAMBA}: can_terminate_prefetch, wait_complete branch and guard",)),
    Clause("D5", "D", "timeout votes completion or timed out",
           "Under timeout the vote is completion (D2, D3) or timed out (T2). A rank past its deadline votes yes even while a pool transfer is pending.",
           "A slow or hung storage tier must not stall the scheduler forever; the fence (F1-F5) makes stopping safe whatever is still in flight.",
           Stance.CORRECTS,
           "Upstream votes `completed or timed out`, then forces no when KV is complete and a pool transfer is pending: in that state a timed-out rank votes no, and the wait lasts until the transfer ends, however long that is (the one decision-table row where the fixed upstream and this spec differ; PR #31668, issue #35012).",
           (f"{HIRADIX}: HiRadixCache.can_terminate_prefetch, timeout branch followed by the guard",
            "issue #35012, PR #35181 (open)"),
           ("D3",)),
    Clause("T1", "T", "Timeout budget",
           "budget = min(timeout_max_s, timeout_base_s + timeout_per_ki_token_s * tokens / 1024), tokens = hit pages * page size; defaults 2.0 s, 0.1 s, 30 s.",
           "Longer hits may take longer, but never unboundedly.",
           Stance.CORRECTS,
           "hiradix and hi_mamba compute min(cfg.max, cfg.base + cfg.per_ki_token * tokens / 1024) with defaults 2.0 / 0.1 / 30 s (PrefetchTimeoutConfig). unified computes base + hit pages * per_page with per_page = page_size / 1024 * per_ki_token and no max cap, with its own defaults 1.0 s and 0.25 s: a long hit waits past the cap the other two apply (a drift between implementations).",
           (f"{HIRADIX}: HiRadixCache._prefetch_timeout_check_linear_func",
            f"{UNIFIED}: UnifiedRadixCache._prefetch_timeout_check_linear_func and _apply_storage_runtime_config",
            "9e9fde147 mem_cache/hicache_storage.py: PrefetchTimeoutConfig defaults")),
    Clause("T2", "T", "Timed out strictly after the budget",
           "An operation is timed out iff (now - start) > budget on the injected monotonic clock; at exactly the deadline it is not.",
           "A stated boundary lets every implementation and test agree to the tick.",
           Stance.KEEPS,
           "All three compare time.monotonic() - operation.start_time > timeout.",
           (f"{HIRADIX}, {UNIFIED}, {HI_MAMBA}: _prefetch_timeout_check_linear_func",)),
    Clause("X1", "X", "Combine: all yes or any terminated",
           "An operation terminates iff every rank votes yes or any rank has already terminated it.",
           "Ranks must insert the same prefix; a rank that already stopped cannot resume.",
           Stance.KEEPS,
           "One MAX all-reduce of [1 - can_terminate, terminated]; the result is `can_terminate or operation_terminated`.",
           (f"{HIRADIX}, {UNIFIED}, {HI_MAMBA}: can_terminate_prefetch, after the reduce",)),
    Clause("X2", "X", "One vote collective per check on each vote group",
           "Under wait_complete and timeout each check runs exactly one MAX all-reduce of [1 - vote, terminated] per operation on each of the cache's vote groups, on every rank; under best_effort none. The vote groups are fixed when the cache is built, from the group sizes: each attention group (context-parallel, then tensor-parallel) larger than one rank, else the tensor-parallel group when it has more than one rank (hi_mamba: the tensor-parallel group when it has more than one rank). Over groups forming a grid, one reduce per group gives every rank the MAX over all of them.",
           "The number of collectives on a group must not depend on rank-local state (L3): a rank that reduces twice on one group, or skips it, while its peers in that group do not, hangs that group.",
           Stance.KEEPS,
           "hiradix and unified reduce through _all_reduce_attn_groups: one all-reduce per attention group (attn_cp, attn_tp) larger than one rank, else one over the tp group when it has more than one rank; hi_mamba reduces over the tp group only when its world size is > 1. The storage controller agrees the hit over each of the same groups (_all_reduce_prefetch_groups, on gloo copies made by _create_prefetch_sync_groups). The count depends only on group sizes, which every rank agrees on; a single rank runs none.",
           (f"{HIRADIX}: HiRadixCache._all_reduce_attn_groups",
            f"{UNIFIED}: UnifiedRadixCache._all_reduce_attn_groups (can_terminate_prefetch, check_prefetch_progress, drain_storage_control_queues)",
            f"{CONTROLLER}: HiCacheController._create_prefetch_sync_groups and _all_reduce_prefetch_groups",
            f"{HI_MAMBA}: HiMambaRadixCache.can_terminate_prefetch, `if self.tp_world_size > 1`")),
    Clause("X3", "X", "Guard before the reduce",
           "The extra-pool guard (D3) enters the vote before the collective, never after it.",
           "Applied after the reduce, one rank may stop while its peers keep waiting: different decisions and different inserted lengths.",
           Stance.KEEPS,
           "In all three classes the guard runs before the states tensor is built and reduced.",
           (*GUARD_COMMITS,)),
    Clause("X4", "X", "Collective shape agreed",
           "Each scheduler step checks an agreed, ordered list of request ids; a rank that no longer tracks a request still joins its collectives, voting [0, 1] (terminated) and committing 0 pages.",
           "Collectives inside loops whose trip count is rank-local, or an early return on one rank, hang the whole group.",
           Stance.CORRECTS,
           "check_prefetch_progress returns True before any collective when the request is not in the rank's ongoing_prefetch map, while a peer that still tracks it enters the vote all-reduce; production hangs came from collectives with rank-local trip counts (issues #30760, #33029, #38273).",
           (f"{HIRADIX}: HiRadixCache.check_prefetch_progress, `if req_id not in self.ongoing_prefetch: return True`",
            "issues #30760, #33029, #38273")),
    Clause("F1", "F", "Terminate stops IO",
           "Marking an operation terminated happens under its lock; after it no IO for the operation starts in any pool (increment refuses; the IO thread re-checks before every batch and before the extra-pool transfer).",
           "IO that starts after the commit writes into slots the tree may already serve.",
           Stance.CORRECTS,
           "PrefetchOperation.increment refuses once terminated, so no KV batch is counted after terminate, but the extra-pool get (batch_get_v2) starts after the KV loop without checking the terminated flag.",
           (f"{HYBRID_CONTROLLER}: PrefetchOperation.increment, HybridCacheController._page_transfer",)),
    Clause("F2", "F", "Atomic progress snapshot",
           "The progress used to commit (KV completed pages, every pool's completed pages, IO in flight) is read under the operation's lock, atomically with the terminate mark; the scheduler never reads progress fields without that lock.",
           "A vote that saw 'not complete, timed out' followed by a terminate that reads a later progress inserts pages whose extra pools are still being written.",
           Stance.CORRECTS,
           "terminate_prefetch calls mark_terminate() (under the lock) and then reads completed_tokens and hash_value after releasing it; can_terminate_prefetch reads completed_tokens, pool_transfers_done and is_terminated() without the lock (windows 2 and 5).",
           (f"{CONTROLLER}: HiCacheController.terminate_prefetch",
            f"{HYBRID_CONTROLLER}: PrefetchOperation.is_terminated")),
    Clause("F3", "F", "Commit clamped to every ALL_PAGES pool",
           "Committed pages never exceed the MIN across ranks of min(KV completed pages, completed pages of every ALL_PAGES pool) at terminate; a slot enters the tree only after a successful load into it has ended. (That the commit also reaches this length is F11.)",
           "KV paired with stale or missing index pages produces garbage silently.",
           Stance.CORRECTS,
           "hiradix inserts prefetch_key[:min_completed_tokens], the MIN of KV progress alone. The extra-pool get runs only when KV fully completed, and pool_transfers_done is set either way, so a partial prefetch inserts KV pages whose index pages were never read (window 3), and a short pool result still inserts the full KV prefix (failure class 6).",
           (f"{HIRADIX}: HiRadixCache.check_prefetch_progress",
            f"{HYBRID_CONTROLLER}: HybridCacheController._page_transfer")),
    Clause("F4", "F", "Trailing state attached only for its length, on every rank",
           "A TRAILING_PAGES state (mamba) is attached only if every rank loaded it for exactly the committed length (agreed in the commit collective); otherwise it is dropped and its slot freed.",
           "A recurrent state belongs to one prefix length; any other length is wrong state, and a state on some ranks only makes ranks serve different prefixes.",
           Stance.CORRECTS,
           "hi_mamba attaches the state to the new host leaf when its own mamba hit is >= 1, a rank-local fact, at the MIN-reduced length, which can be shorter than the length the state was loaded for when a peer completed less.",
           (f"{HI_MAMBA}: HiMambaRadixCache.check_prefetch_progress (mamba_loaded) and _insert_helper_host",)),
    Clause("F5", "F", "In-flight IO excluded, freed at its end",
           "A slot with IO in flight at terminate is neither inserted nor freed; it is freed by whoever ends that IO.",
           "Freeing it lets the allocator hand it out while the old copy still writes into it.",
           Stance.CORRECTS,
           "For KV, the IO thread releases host_indices[completed_tokens:] after its last batch returns, which respects this. Sidecar slots are not tracked that way: release_aborted_request frees the pool transfers' host slots (prefetch_abort) at once, while the pool get may still be running (the sidecar use-after-free of PR #31668).",
           (f"{CONTROLLER}: HiCacheController.prefetch_io_aux_func",
            f"{HI_MAMBA}: HiMambaRadixCache.release_aborted_request",
            "PR #31668")),
    Clause("F6", "F", "The fence applies under every policy",
           "best_effort, wait_complete and timeout all commit through the same fence (F1 to F5).",
           "The decision is a policy question; the fence is a safety question that no policy may skip.",
           Stance.CORRECTS,
           "best_effort returns before the guard, and the commit inserts whatever completed_tokens says (window 1).",
           (f"{HIRADIX}: HiRadixCache.can_terminate_prefetch and check_prefetch_progress",)),
    Clause("F7", "F", "Revoke terminates",
           "A prefetch whose agreed hit, counted in pages usable in every pool it loads, is below the threshold is revoked; a revoked operation is marked terminated and done under its lock, no IO starts after, and every slot is freed once its IO ended.",
           "A revoked operation left unterminated can still start IO into slots that were freed.",
           Stance.CORRECTS,
           "The prefetch thread revokes a short hit by queueing its request id and releasing its host slots; the operation is never marked terminated and pool_transfers_done stays false (window 4).",
           (f"{CONTROLLER}: HiCacheController.prefetch_thread_func (prefetch_revoke_queue)",)),
    Clause("F8", "F", "Every path returns every slot",
           "Commit, revoke, abort and error paths all return every slot and clear the operation from the ongoing map and the rate limit; a hit is reported only for data actually committed.",
           "A dropped operation leaks host slots forever and can wedge the prefetch rate limit.",
           Stance.CORRECTS,
           "Upstream error paths have leaked slots and reported hits for prefetches that were never registered (failure class 9, from public bug reports and fixes).",
           ("failure class P9 below: public upstream bug reports and fixes, 2025-2026",)),
    Clause("F9", "F", "No free under a pending copy",
           "A slot is freed only when no copy into or out of it is pending, including slots an insert's de-duplication releases.",
           "Reusing a slot that a queued copy still writes corrupts KV.",
           Stance.CORRECTS,
           "An insert's de-duplication freed slots a queued load was writing (failure class 8, from public bug reports and fixes).",
           ("failure class P8 below: public upstream bug reports and fixes, 2025-2026",)),
    Clause("F10", "F", "Window whole, for its length; a match ends where its window is",
           "A TRAILING_WINDOW pool (sliding-window KV) keeps the pages within the window before a match end: a match of p pages needs the last min(window pages, p) pages of it. The commit attaches such a pool's pages only as the whole window that every rank loaded for exactly the committed length (agreed in the commit collective, as F4); otherwise none of them is attached and their slots are freed. The committed KV stays (a full-attention hit), but a match ends only where every page of its window carries the pool's data, in the tier it is served from: the prefix a commit makes servable is clamped to the deepest end whose window is present, on every rank.",
           "Sliding-window layers read only the last window of KV; a window of another length, a partial one, or one present on some ranks only pairs the match with the wrong KV or lets ranks serve different prefixes. Full-attention KV without its window is still worth keeping: a later request whose window covers it restores the window.",
           Stance.KEEPS,
           "Upstream's SWA component tombstones: evicting SWA data from an inner node keeps the node and its full-attention KV with its SWA value set to None (a device leaf is evicted whole, cascading to every component). Its match validator resets the window at a node with no SWA data (in HiCache mode: neither device nor host) and accepts a match end only once sliding_window_size tokens of SWA-carrying nodes follow the last such node: a tombstoned node serves no match end within the window after it, and the tokens past the usable end are recomputed by prefill; inserting the recomputed KV restores a tombstone that lies within the request's window. A prefetch takes one window of host pages only when it covers a whole window, keyed to the last N hit pages, and the commit attaches it all or nothing: only when the MIN over ranks of the loaded window pages reaches the window, placed at the end of the inserted range. Upstream's commit does not clamp KV to its sidecar pools, so the inserted range always ends where the window was loaded; here F3 can clamp the commit below the KV hit, and the window must then be dropped: placed at the end of the shorter commit, its pages would pair with the wrong tokens.",
           (f"{SWA_COMPONENT}: SWAComponent.create_match_validator, drive_eviction, update_component_on_insert_overlap",
            f"{SWA_COMPONENT}: SWAComponent.build_hicache_transfers (PREFETCH) and _commit_prefetch",
            f"{HYBRID_CONTROLLER}: HybridCacheController._sync_trailing_keys (the last N hit pages)",
            "9e9fde147 mem_cache/hicache_storage.py: HiCacheFile.batch_exists_v2 (trailing_pages: the deepest prefix whose last N pages exist)",
            f"{UNIFIED}: UnifiedRadixCache.check_prefetch_progress (the sidecar hit pages in the packed MIN)"),
           ("F3", "F4", "S4")),
    Clause("S1", "S", "No exposure of slots under IO",
           "No slot is inserted or loaded back while IO into it is in flight, or while the operation that owns it may still start IO (it is neither terminated, revoked nor done: its IO thread has not said it starts no more).",
           "This is the garbled-output bug, stated as a trace property.",
           Stance.CORRECTS,
           "Violated through windows 1, 2 and 5 (see F2, F6), and before the guard by every prefetch with an extra pool.",
           (f"{HIRADIX}: HiRadixCache.check_prefetch_progress", "991689fd0~1 mem_cache/hiradix_cache.py")),
    Clause("S2", "S", "No IO after terminate",
           "No IO of an operation starts after its terminate or revoke event.",
           "Terminate is the point after which the tree may serve the slots.",
           Stance.CORRECTS,
           "The extra-pool get starts without re-checking the terminated flag (window 2), and a revoked operation is never terminated (window 4).",
           (f"{HYBRID_CONTROLLER}: HybridCacheController._page_transfer",)),
    Clause("S3", "S", "Slots end exactly once",
           "Every slot allocated to an operation ends exactly once, inserted into the tree or freed, and is never freed while IO into or out of it is in flight.",
           "Double frees and leaks both corrupt the allocator; a free under IO corrupts data.",
           Stance.ADDS,
           "Upstream states no such rule; it has leaked slots on error paths and freed sidecar slots under a running get (F5, F8).",
           (f"{HI_MAMBA}: HiMambaRadixCache.release_aborted_request", "PR #31668")),
    Clause("S4", "S", "Same commit on every rank",
           "Every rank commits the same length for an operation (a revoke commits 0).",
           "Ranks hold shards of the same KV; different lengths pair shards of different prefixes.",
           Stance.KEEPS,
           "Completed tokens are MIN-reduced across ranks before the insert; unified also MIN-reduces the sidecar hit pages in the same collective.",
           (f"{HIRADIX}: HiRadixCache.check_prefetch_progress (ReduceOp.MIN)",
            f"{UNIFIED}: UnifiedRadixCache.check_prefetch_progress (packed MIN)")),
    Clause("S5", "S", "Loaded bytes are stored bytes",
           "Bytes loaded back to the device equal the bytes stored for the same page key, in every pool.",
           "The end-to-end property users care about.",
           Stance.KEEPS,
           "The property the upstream bug broke; PR #27550 restored it for the window it closed.",
           ("PR #27550 (991689fd0)",)),
    Clause("L1", "L", "wait_complete ends once IO ends",
           "Under wait_complete an operation terminates at the first check after its IO ended on every rank, and commits the whole agreed hit when every IO succeeded.",
           "Waiting must end, and must be worth it.",
           Stance.KEEPS,
           "The IO thread marks an operation terminated when a batch comes back short, which ends the wait; pool_transfers_done is set when the pool get returns.",
           (f"{CONTROLLER}: HiCacheController._page_transfer", f"{HYBRID_CONTROLLER}: HybridCacheController._page_transfer"),
           ("L4",)),
    Clause("L2", "L", "timeout ends within its bound",
           "Under timeout a rank past its deadline votes yes, and a check at which every rank is past the deadline terminates the operation; IO in flight then is excluded by the fence (so the insert lags the bound by at most the IO batch in flight).",
           "The timeout policy's promise.",
           Stance.CORRECTS,
           "Upstream keeps the promise while KV is incomplete, and breaks it once KV is complete and a pool transfer is pending: the vote-forcing guard (D5) keeps every rank voting no past the deadline, for as long as the transfer runs (PR #31668, issue #35012).",
           (f"{HIRADIX}: HiRadixCache.can_terminate_prefetch", "issue #35012, PR #35181 (open)"),
           ("D3", "F1", "F3", "F5")),
    Clause("L3", "L", "Same collectives on every rank of a group",
           "Per scheduler step, and per operation outside steps, the ranks of each process group run the same collectives on that group in the same order (an implementation with one group: every rank).",
           "Otherwise the group hangs: its ranks wait in collectives their peers never enter, or pair different collectives.",
           Stance.CORRECTS,
           "Upstream has hung on rank-local collective counts: progress checked inside loops with rank-local trip counts, and early returns for untracked requests (X4). With several groups (tp, attn_tp, attn_cp, pipeline stages) one rank-local count on one group hangs that group while the others go on.",
           ("issues #30760, #33029, #38273",
            f"{UNIFIED}: UnifiedRadixCache._all_reduce_attn_groups and _barrier_attn_groups")),
    Clause("L4", "L", "Every transfer ends within a bound",
           "Every IO an operation starts (a KV batch or a pool transfer) ends, done or failed, within a bound the implementation states (io_timeout_s, on the injected clock). A transfer still running past its bound counts as failed for the decision and the commit: its pages are not completed, so its pool counts as done and the commit is clamped before them (F3). Its slots stay excluded until the IO really returns (F5).",
           "The decision must never depend on a read that never returns. Under timeout, D3 already lets the deadline end the wait; under wait_complete only this bound does, and without it one hung sidecar read holds the request, its host slots and the rate limit forever.",
           Stance.ADDS,
           "The IO thread waits in the backend's batch_get_v2 (and each KV batch get) until it returns; no bound ends a transfer, so pool_transfers_done is set only when the backend returns.",
           (f"{HYBRID_CONTROLLER}: HybridCacheController._page_transfer", "issue #35012"),
           ("F3", "F5")),
    Clause("L5", "L", "A storage error ends its transfer, not the IO machinery",
           "A storage call that raises or fails ends that transfer as failed (a KV batch, a pool transfer, a backup): its operation then ends as L1 and L2 say, and the thread that ran it goes on to later transfers.",
           "An IO or backup thread that dies on one backend error strands every operation behind it: their slots never return, the rate limit stays taken, and across ranks the peers wait in collectives for progress that never comes.",
           Stance.CORRECTS,
           "prefetch_io_aux_func and backup_thread_func catch only queue.Empty: an exception from a storage call (HiCacheFile.get raises IOError('Short read')) ends the thread, so the operation is neither completed nor terminated and no later prefetch or backup of that cache runs.",
           (f"{CONTROLLER}: HiCacheController.prefetch_io_aux_func and backup_thread_func (`except Empty`)",)),
    Clause("L6", "L", "Every backup ends stored",
           "A page whose backup to storage was started ends stored under its own key once the backup ends, whatever the tree did to its node meanwhile (a split by an insert sharing part of it, an overlapping insert, an eviction).",
           "A backup the tree reshaped under it that stores only part of what it was started for loses pages silently: the storage tier serves a shorter prefix than was written, for every server that shares it.",
           Stance.KEEPS,
           "The write-through ack hands the node, as it is at the ack, to the storage backup: a node split while its host copy was in flight is only its tail by then.",
           (f"{HIRADIX}: HiRadixCache.writing_check and write_backup_storage (the node's key, hashes and host slots at the ack)",)),
    Clause("S6", "S", "Pages of another configuration are misses",
           "A page stored by a configuration whose KV format differs (dtype, per-pool layout, page size, tensor-parallel rank or size) is never served: reading it is a miss, never bytes.",
           "A page of another format is someone else's bytes: served, it is garbage in this model's attention, silently.",
           Stance.CORRECTS,
           "HiCacheFile's key suffix holds the model name and the tensor-parallel rank and size, not the dtype or layout, and get rejects only a short read: a page written by a server with larger or differently typed KV entries is served as data.",
           ("9e9fde147 mem_cache/hicache_storage.py: HiCacheFile.__init__ (the key suffix) and HiCacheFile.get (`Short read` only)",)),
    Clause("S7", "S", "Damaged pages are misses",
           "A stored page whose bytes changed after they were written (bit rot, a torn write, a damaged header) is detected when read, by its length and a checksum bound to its key, and is a miss for that page and every later one.",
           "Storage tiers outlive processes; without a check, damage is served as data.",
           Stance.ADDS,
           "HiCacheFile stores raw page bytes with no header, length or checksum; get detects a file shorter than the page and nothing else.",
           ("9e9fde147 mem_cache/hicache_storage.py: HiCacheFile.get and set",)),
    Clause("S8", "S", "A prefetch asks only for the pages its host slots hold",
           "A prefetch reads from storage exactly the pages its host slots hold: when the host tier has less room than the request (after host eviction), the prefetch shrinks to the whole pages that fit, its page keys with it, or does not start.",
           "A key list longer than its slots sends pages to host slots the operation never got: the IO runs off its slots (an IO thread dies on the index) or into another holder's pages.",
           Stance.KEEPS,
           "The degraded allocation takes the host room left, page-aligned; the page keys the controller reads must be cut to it with the slots.",
           (f"{HIRADIX}: HiRadixCache.prefetch_from_storage (the allocation retried at available_size())",
            f"{HI_MAMBA}: HiMambaRadixCache.prefetch_from_storage")),
    Clause("F11", "F", "The commit takes what the fence allows",
           "The committed length reaches the fence's bound (F3): every page whose KV and every ALL_PAGES pool finished loading before terminate, agreed across ranks, is committed.",
           "A prefetch that loaded pages and then drops them wastes the storage read it waited for.",
           Stance.CORRECTS,
           "0.5.2x commits the progress its ACK drain had acknowledged (MIN-reduced by the sync thread), which can lag the pages loaded when the check terminates: safe, and short.",
           ("0.5.23 mem_cache/unified_radix_cache.py: UnifiedRadixCache._handle_prefetch_result (completed_tokens as the drain left it)",)),
    Clause("A1", "A", "The ACK drain's vote decides only the timeout",
           "_can_terminate_prefetch votes yes under best_effort, no under wait_complete (the drain commits completion), and under timeout yes exactly when the deadline (A3) has passed and the operation is not done (KV landed and no pool transfer pending: the drain commits that one).",
           "Completion is committed by the ACK drain from MIN-reduced progress; a vote for it would only add collectives. Past the deadline a pending sidecar read is cut like any other IO (L2, D5): the fence commits what every pool loaded.",
           Stance.CORRECTS,
           "0.5.23 votes as A1 says except in one row: once KV has landed, _prefetch_deadline_expired never expires, so a pending sidecar read holds the wait past the deadline. That is the divergence landed-kv-waits (spec/divergences.py): upstream's design, judged apart from defects.",
           ("0.5.23 mem_cache/unified_radix_cache.py: UnifiedRadixCache._can_terminate_prefetch and _prefetch_deadline_expired",)),
    Clause("A2", "A", "The ACK drain's timeout verdict is one MAX per check",
           "Under timeout each check of an unfinished, unterminated operation runs one MAX all-reduce of the local verdict on each vote group, and every rank ends the wait if any rank's verdict is yes; under best_effort and wait_complete a check runs none. A terminated operation ends.",
           "Wall clocks differ across ranks: one rank past its deadline decides for all, and the verdict is the same on every rank.",
           Stance.KEEPS,
           "0.5.23's _can_terminate_prefetch (MAX over tp, broadcast along pp) and check_prefetch_progress.",
           ("0.5.23 mem_cache/unified_radix_cache.py: UnifiedRadixCache._can_terminate_prefetch (`_all_reduce(..., ReduceOp.MAX)`) and check_prefetch_progress",)),
    Clause("A3", "A", "The ACK drain's deadline counts from the first blocked check",
           "Under timeout the wait timer starts at the first check that finds the operation unfinished, and the operation is past its deadline strictly after base + pages * per-page seconds on that timer.",
           "Time spent queued before the scheduler first asks is not the storage tier's fault.",
           Stance.KEEPS,
           "0.5.23's _start_storage_prefetch_wait ('Start at the first blocked admission poll') and _prefetch_deadline_expired (`elapsed() > timeout_s`).",
           ("0.5.23 mem_cache/unified_radix_cache.py: UnifiedRadixCache._start_storage_prefetch_wait",)),
    Clause("R1", "R", "The drain vote is the policy alone",
           "can_terminate_prefetch votes yes under best_effort, no under wait_complete (the ACK drain commits completion), and under timeout yes exactly when the operation is past its deadline (T2, counted from its start), whether or not KV has landed.",
           "Completion is committed by the drain at the final ACK, MIN-reduced across ranks; the commit is clamped to the shortest hit over KV and its KV-derived sidecars, so cutting a landed KV at the deadline exposes nothing.",
           Stance.KEEPS,
           "0.5.19/0.5.20's HiRadixCache.can_terminate_prefetch and _prefetch_timeout_check_linear_func, as written.",
           ("0.5.20 mem_cache/hiradix_cache.py: HiRadixCache.can_terminate_prefetch",)),
    Clause("R2", "R", "The drain vote is one MAX of [terminated or vote] per check",
           "Each check of an operation a rank tracks runs one MAX all-reduce of (terminated or vote) on each vote group, under every policy, and every rank ends the wait when any rank's is yes.",
           "One rank past its deadline, or one rank that already stopped, decides for all: the ranks commit the same prefix.",
           Stance.KEEPS,
           "0.5.19/0.5.20's HiRadixCache.check_prefetch_progress (`_all_reduce(should_terminate_tensor, ReduceOp.MAX)`).",
           ("0.5.20 mem_cache/hiradix_cache.py: HiRadixCache.check_prefetch_progress",)),
]

# Each clause's kind (spec/kinds.py) and, where it judges some architectures only, their profiles (spec/profiles.py).
_VOTING = VOTE_PROFILES
_KINDS: dict[str, tuple[Kind, tuple[str, ...]]] = {
    "C1": (Kind.HARDENING, ()), "C2": (Kind.HARDENING, ()),
    "D1": (Kind.MECHANISM, _VOTING), "D2": (Kind.MECHANISM, _VOTING), "D3": (Kind.MECHANISM, _VOTING),
    "D4": (Kind.MECHANISM, _VOTING), "D5": (Kind.MECHANISM, _VOTING),
    "T1": (Kind.HARDENING, ()), "T2": (Kind.MECHANISM, (*_VOTING, DRAIN_VOTE.id)),
    "X1": (Kind.MECHANISM, _VOTING), "X2": (Kind.MECHANISM, _VOTING), "X3": (Kind.MECHANISM, _VOTING),
    # Every rank skipping an untracked id alike hangs nothing (L3 judges a hang); joining neutrally is hardening.
    "X4": (Kind.HARDENING, _VOTING),
    "F1": (Kind.HARDENING, ()), "F2": (Kind.MECHANISM, (FENCED_VOTE.id,)), "F3": (Kind.SAFETY, ()),
    "F4": (Kind.SAFETY, ()), "F5": (Kind.SAFETY, ()), "F6": (Kind.SAFETY, ()), "F7": (Kind.HARDENING, ()),
    "F8": (Kind.SAFETY, ()), "F9": (Kind.SAFETY, ()), "F10": (Kind.SAFETY, ()), "F11": (Kind.HARDENING, ()),
    "S1": (Kind.SAFETY, ()), "S2": (Kind.HARDENING, ()), "S3": (Kind.SAFETY, ()), "S4": (Kind.AGREEMENT, ()),
    "S5": (Kind.SAFETY, ()), "S6": (Kind.SAFETY, ()), "S7": (Kind.HARDENING, ()),
    "S8": (Kind.SAFETY, ()),
    "L1": (Kind.LIVENESS, ()), "L2": (Kind.LIVENESS, ()), "L3": (Kind.LIVENESS, ()), "L4": (Kind.HARDENING, ()),
    "L5": (Kind.LIVENESS, ()), "L6": (Kind.LIVENESS, ()),
    "A1": (Kind.MECHANISM, (ACK_DRAIN.id,)), "A2": (Kind.MECHANISM, (ACK_DRAIN.id,)), "A3": (Kind.MECHANISM, (ACK_DRAIN.id,)),
    "R1": (Kind.MECHANISM, (DRAIN_VOTE.id,)), "R2": (Kind.MECHANISM, (DRAIN_VOTE.id,)),
}

def _with_kinds(clauses: list[Clause]) -> dict[str, Clause]:
    missing = sorted({c.id for c in clauses} ^ set(_KINDS))
    if missing:
        raise ConfigError("clause kinds", missing, "exactly one kind entry per clause of the catalogue")
    out = {}
    for c in clauses:
        kind, profiles = _KINDS[c.id]
        unknown = [p for p in profiles if p not in PROFILES]
        if unknown or (kind is Kind.MECHANISM and not profiles):
            raise ConfigError(f"profiles of {c.id}", profiles, "profile ids of spec.profiles (a mechanism clause names at least one)")
        out[c.id] = replace(c, kind=kind, profiles=profiles)
    return out


# Ordered by group, then as written (A last: another architecture's mechanism).
CATALOGUE: dict[str, Clause] = dict(sorted(_with_kinds(_CLAUSES).items(), key=lambda item: list(GROUPS).index(item[1].group)))

# Trace checker names that are not clause IDs map to the clauses they check.
CHECKER_CLAUSES = {
    "D": ("D1", "D2", "D3", "D4", "D5"),
    "fence_lock": tuple(sorted({kept for kept, _ in FENCED_SECTIONS.values()})),
}


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
