"""window_agreed_locally: unified_radix whose commit attaches a sliding window its own rank loaded, whatever its peers did.

The commit collective agrees the committed length, and for every trailing
pool whether every rank loaded it for exactly that length (F4, F10). This
variant ignores that agreement for the window: a rank whose window arrived
attaches it while a peer whose window was still in flight drops its own, so
after the same commit the ranks serve different prefixes. With one rank it
behaves exactly like unified_radix.

Must be caught by: F10 (a window kept on some ranks only), in the multi-rank
check that every rank serves the same prefix after a commit.
"""

from __future__ import annotations

import torch

from caches.core.commit import PrefetchCommit
from caches.core.operation import PrefetchOperation, Progress
from caches.core.tree import TreeNode
from caches.unified_radix import UnifiedRadixCache
from caches.variants._adapter import VariantAdapter, variant_of
from spec.fence import HitPolicy


class LocalWindowCommit(PrefetchCommit):
    def insert(self, op: PrefetchOperation, progress: Progress, pages: int, attach: set[str], kv_slots: torch.Tensor, keys: list[str]) -> TreeNode:
        # The defect: this rank's own loading decides, not the agreement of every rank.
        local = {p.name for p in progress.pool_progress if p.hit_policy is HitPolicy.TRAILING_WINDOW and p.completed_pages == pages}
        return super().insert(op, progress, pages, attach | local, kv_slots, keys)


class WindowAgreedLocallyCache(UnifiedRadixCache):
    name = "window_agreed_locally"
    commit_class = LocalWindowCommit


def window_agreed_locally() -> VariantAdapter:
    return variant_of("unified_radix_swa", "window_agreed_locally", WindowAgreedLocallyCache)
