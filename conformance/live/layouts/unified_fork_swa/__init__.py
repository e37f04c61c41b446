"""The fork's UnifiedRadixCache on a hybrid sliding-window model: the FULL and SWA components, the tree the fork's
scheduler builds for one with HiCache on (registry: "HybridModel launches HiCache via UnifiedRadixCache by default").

The device pool is an SWAKVPool (full-attention and sliding-window layers,
each an MHA pool) with its SWATokenToKVPoolAllocator (every full slot mapped
to a window slot); init_hicache's assembler picks the SWA strategy from it: a
host pool group of KV and SWA. A prefetch carries the window's trailing pages
(PoolHitPolicy.TRAILING_PAGES over the window's pages), committed whole or not
at all: the harness's TRAILING_WINDOW pool.
"""

from dataclasses import replace

from conformance.live.layout import Mark, Module
from conformance.live.layouts.unified_fork import LAYOUT as FORK_UNIFIED

SWA_STRATEGY = Mark("srt/mem_cache/hybrid_cache/hybrid_pool_assembler.py", r"^class _SwaStrategy\b", "SWA strategy in the unified assembler")
SWA_MODULES = {
    "swa_memory_pool": Module("sglang.srt.mem_cache.swa_memory_pool", "SWAKVPool"),
    "swa_allocator": Module("sglang.srt.mem_cache.allocator.swa", "SWATokenToKVPoolAllocator"),
}

LAYOUT = replace(
    FORK_UNIFIED,
    key="UnifiedRadixCache+swa/fork",
    layout_name="the fork's sliding-window build",
    session="conformance.live.layouts.unified_fork_swa.session:ForkUnifiedSwaSession",
    modules={**FORK_UNIFIED.modules, **SWA_MODULES},
    capabilities=frozenset({"multi_rank", "pool:swa", "kv_formats"}),
    default_extra_pools=("swa",),
    marks=(*FORK_UNIFIED.marks, SWA_STRATEGY,
           Mark("srt/mem_cache/unified_cache_components/swa_component.py", None, "SWA component"),
           # Where a prefetched window's host slots join the tree (the storage tier of the window, 2026-06 on).
           Mark("srt/mem_cache/unified_cache_components/swa_component.py", r"def _attach_swa_host_value\b",
                "storage prefetch of the window (_attach_swa_host_value)")),
)
