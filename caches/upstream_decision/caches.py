"""Our three caches, each deciding with upstream's `can_terminate_prefetch` instead of its own.

Everything but the decision stays ours: the tree, the pools, the threads,
`check_prefetch_progress` and the fence. So a conformance run of these
caches judges upstream's decision code alone, in a cache that otherwise
conforms.
"""

from __future__ import annotations

from typing import Any

from caches.core.process_groups import build_kind_reducers
from caches.hi_mamba_radix import HiMambaRadixCache
from caches.hiradix import HiRadixCache
from caches.unified_radix import UnifiedRadixCache
from caches.upstream_decision.shim import BoundDecision
from caches.upstream_decision.source import ExtractedDecision


class UpstreamDecisionMixin:
    """Put before one of our caches: its decision becomes upstream's (the extracted code, bound here)."""

    def __init__(self, *args: Any, upstream: ExtractedDecision, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Upstream's decision picks its own groups (self.attn_cp_group, attn_tp_group, tp_group): each kind
        # given gets its own reducer, so a decision reducing over the wrong one is seen doing so.
        self.kind_reducers: dict[str, Any] = {}
        if kwargs.get("process_groups") is not None:
            self.kind_reducers, own = build_kind_reducers(kwargs["process_groups"], self.device, self.trace, self.reducer)
            self._own_groups = [*self._own_groups, *own]
        self.upstream_decision = BoundDecision(upstream, self)

    def can_terminate_prefetch(self, operation: Any) -> bool:
        return self.upstream_decision(operation)


class SGLangHiRadixCache(UpstreamDecisionMixin, HiRadixCache):
    name = "sglang:hiradix"


class SGLangUnifiedRadixCache(UpstreamDecisionMixin, UnifiedRadixCache):
    name = "sglang:unified_radix"


class SGLangHiMambaRadixCache(UpstreamDecisionMixin, HiMambaRadixCache):
    name = "sglang:hi_mamba_radix"


# our cache name (names.UPSTREAM_CLASSES) -> the cache running that upstream class's decision
UPSTREAM_DECISION_CACHES = {
    "hiradix": SGLangHiRadixCache,
    "unified_radix": SGLangUnifiedRadixCache,
    "hi_mamba_radix": SGLangHiMambaRadixCache,
}
