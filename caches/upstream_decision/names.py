"""The shim's name table: every name upstream's decision code may read, and what it reads here.

This table is the whole contract between SGLang's `can_terminate_prefetch`
(and the helpers it calls) and the cache of ours it runs in. A name that is
not here is refused before anything runs (source.py), with one error naming
it and the class; conformance/ADAPTERS.md shows the same table to users (a
test keeps the two in step).
"""

from __future__ import annotations

# Where the classes live in an SGLang checkout, relative to its root.
MEM_CACHE_DIR = "python/sglang/srt/mem_cache"

# our cache name -> (file under MEM_CACHE_DIR, upstream class)
UPSTREAM_CLASSES = {
    "hiradix": ("hiradix_cache.py", "HiRadixCache"),
    "unified_radix": ("unified_radix_cache.py", "UnifiedRadixCache"),
    "hi_mamba_radix": ("hi_mamba_radix_cache.py", "HiMambaRadixCache"),
}

ENTRY_METHOD = "can_terminate_prefetch"

# self.<name> -> what it is here. Methods of the upstream class that the
# decision calls (directly, or through an attribute its __init__ sets to one,
# like `self.is_prefetch_timeout = self._prefetch_timeout_check_linear_func`)
# are upstream's own code, compiled and bound too; they are not listed here.
SELF_NAMES = {
    "prefetch_stop_policy": "the cache's policy string (best_effort, wait_complete, timeout)",
    "page_size": "the cache's page size (tokens per page)",
    "prefetch_timeout_config.base": "TerminationConfig.timeout_base_s",
    "prefetch_timeout_config.per_ki_token": "TerminationConfig.timeout_per_ki_token_s",
    "prefetch_timeout_config.max": "TerminationConfig.timeout_max_s",
    "prefetch_timeout_base": "TerminationConfig.timeout_base_s",
    "prefetch_timeout_per_page": "page_size / 1024 * TerminationConfig.timeout_per_ki_token_s (as upstream's _apply_storage_runtime_config derives it)",
    "tp_world_size": "the world size of the cache's tp group when it was given several (process_groups), else of its reducer (1 without a process group)",
    "tp_group": "a handle on the cache's tp group (process_groups), else on its process group; torch.distributed calls on it go to that group",
    "attn_cp_group": "a handle on the cache's attention context-parallel group when it was given one (process_groups), else None",
    "attn_tp_group": "a handle on the cache's attention tensor-parallel group when it was given one (process_groups), else None (upstream then reduces over tp_group)",
}

# operation.<name> -> what it is here. Every field comes from one snapshot
# (PrefetchOperation.progress()) taken under the operation's lock at the start
# of the decision, so the decision never sees a torn state.
OPERATION_NAMES = {
    "hash_value": "the snapshot's hit page hashes (empty until the hit query ran)",
    "completed_tokens": "the snapshot's KV progress",
    "pool_transfers": "the snapshot's extra-pool transfers (a tuple of pool names: empty, so false, when there are none)",
    "pool_transfers_done": "the snapshot's pool_transfers_done",
    "is_terminated": "is_terminated() returns the snapshot's terminated flag",
    "start_time": "the operation's start time on the injected clock",
}

# Module-level names (dotted, as read) -> what they are here.
GLOBAL_NAMES = {
    "time.monotonic": "the injected clock, read once per decision (every call in one decision returns the same time)",
    "torch.tensor": "torch.tensor (real tensors; .item() and indexing work as upstream expects)",
    "torch.int": "torch.int",
    "torch.int32": "torch.int32",
    "torch.int64": "torch.int64",
    "torch.distributed.ReduceOp.MAX": "MAX: the cache's reducer all_reduce_max",
    "torch.distributed.ReduceOp.MIN": "MIN: the cache's reducer all_reduce_min",
    "torch.distributed.all_reduce": "the cache's reducer (torch.distributed over its process group, or nothing on one rank); the first MAX reduce of a decision is its vote collective, where the VOTE event is recorded",
    "torch.distributed.get_world_size": "the world size of the group handle given (tp_group)",
}
GLOBAL_ROOTS = frozenset(name.split(".")[0] for name in GLOBAL_NAMES)


def self_namespaces() -> frozenset[str]:
    """self.<name> that are objects with mapped attributes (prefetch_timeout_config)."""
    return frozenset(name.split(".")[0] for name in SELF_NAMES if "." in name)
