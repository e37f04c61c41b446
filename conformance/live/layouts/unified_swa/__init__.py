"""0.5.22-0.5.23's UnifiedRadixCache on a hybrid sliding-window model: the FULL and SWA components, as upstream's
scheduler builds the tree for one (create_unified_radix_cache appends SWA when the model is hybrid SWA).

The device pool is an SWAKVPool (full-attention and sliding-window layers,
each an MHA pool) with its SWATokenToKVPoolAllocator (every full slot mapped
to a window slot), what the scheduler's KV-cache configurator builds for a
hybrid SWA model; init_hicache's assembler picks the SWA strategy from it: a
host pool group of KV and SWA. A prefetch carries the window's trailing pages
(PoolHitPolicy.TRAILING_PAGES over the window's pages), committed whole or not
at all: the harness's TRAILING_WINDOW pool.
"""

from dataclasses import replace

from conformance.live.layouts.unified import LAYOUT as UNIFIED
from conformance.live.layouts.unified_fork_swa import SWA_MODULES, SWA_STRATEGY

LAYOUT = replace(
    UNIFIED,
    key="UnifiedRadixCache+swa",
    layout_name="the 0.5.22+ sliding-window build",
    session="conformance.live.layouts.unified_swa.session:UnifiedSwaSession",
    modules={**UNIFIED.modules, **SWA_MODULES},
    capabilities=frozenset({"multi_rank", "pool:swa", "kv_formats"}),
    default_extra_pools=("swa",),
    marks=(*UNIFIED.marks, SWA_STRATEGY),
)
