"""sidecar_hit_unreduced: hiradix whose commit agrees the KV length across ranks, then clamps to its own sidecar alone.

The commit's one MIN collective must carry what this rank can vouch for in
every pool: KV clamped to each ALL_PAGES pool (F3), so that every rank
commits the same length (S4). Here it carries the KV pages alone, and each
rank clamps the agreed length to its own indexer pages afterwards, as
upstream's UnifiedRadixCache reduced its completed KV tokens but not its
sidecar pools' hit pages before 631db6c75 (PR #27264): a rank whose indexer
transfer landed commits the agreed KV length, a peer whose indexer transfer
was still held commits less. With one rank it behaves exactly like hiradix.

Must be caught by: S4 (ranks commit different lengths) and F3 (a commit
above the fence), in the cross-rank exploration where the ranks' indexer
transfers end differently around the commit (conformance/suite/test_crossrank.py).
"""

from __future__ import annotations

from typing import Any, Sequence

from caches.core.commit import PrefetchCommit
from caches.core.operation import PrefetchOperation
from caches.hiradix import HiRadixCache
from caches.variants._adapter import VariantAdapter, hiradix_variant
from caches.variants._reducer import WrappedReducer
from spec.fence import COMMIT_COLLECTIVE


class KvOnlyReducer(WrappedReducer):
    """The commit collective agrees the KV pages; the local clamp comes after."""

    def __init__(self, inner: Any, commit: "KvOnlyAgreedCommit") -> None:
        super().__init__(inner)
        self.commit = commit

    def all_reduce_min(self, values: Sequence[int], *, name: str, op: str | None = None, step: int | None = None) -> list[int]:
        if name != COMMIT_COLLECTIVE or self.commit.current is None:
            return self.inner.all_reduce_min(values, name=name, op=op, step=step)
        progress = self.commit.current.progress()
        kv_pages = min(progress.completed_tokens // self.commit.page_size, len(progress.hash_value))
        reduced = self.inner.all_reduce_min([kv_pages, *values[1:]], name=name, op=op, step=step)
        return [min(reduced[0], values[0]), *reduced[1:]]  # the defect: this rank's sidecar clamp, after the reduce


class KvOnlyAgreedCommit(PrefetchCommit):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.current: PrefetchOperation | None = None
        self.reducer = KvOnlyReducer(self.reducer, self)

    def commit(self, op: PrefetchOperation, step: int) -> int:
        self.current = op
        try:
            return super().commit(op, step)
        finally:
            self.current = None


class SidecarHitUnreducedCache(HiRadixCache):
    name = "sidecar_hit_unreduced"
    commit_class = KvOnlyAgreedCommit


def sidecar_hit_unreduced() -> VariantAdapter:
    return hiradix_variant("sidecar_hit_unreduced", SidecarHitUnreducedCache)
