"""A real PrefetchOperation placed in a given decision state, for probing `can_terminate_prefetch`."""

from __future__ import annotations

import torch

from caches.core.hashing import page_hashes
from caches.core.operation import PoolPlan, PrefetchOperation
from caches.errors import CacheArgumentError
from spec.decision import DecisionState
from spec.fence import HitPolicy
from spec.trace import NullRecorder


def probe_operation(state: DecisionState, *, page_size: int, start_time: float) -> PrefetchOperation:
    """Not registered as ongoing and never committed, so its slot numbers are not taken from any allocator."""
    pages = max(state.hit_pages, 1)
    hashes = page_hashes(list(range(pages)), 1)
    slots = torch.arange(pages * page_size, dtype=torch.int64)
    extras = []
    if state.pool_transfers_present:
        extras.append(PoolPlan("indexer", HitPolicy.ALL_PAGES, slots, "kv"))

    def never_freed(group: str, freed: list[int]) -> None:
        raise CacheArgumentError("operation", "a probe operation", "an operation the cache registered: a probe owns no slots to free")

    op = PrefetchOperation(
        "probe", requested_hashes=hashes, kv=PoolPlan("kv", HitPolicy.ALL_PAGES, slots, "kv"), extras=extras,
        page_size=page_size, start_time=start_time, trace=NullRecorder(), free_slots=never_freed,
    )
    op.hash_value = hashes[: state.hit_pages]
    op.completed_tokens = state.completed_tokens
    op.pool_transfers_done = state.pool_transfers_done
    if state.terminated:
        op.mark_terminate()
    return op
