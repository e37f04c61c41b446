"""0.5.2x's UnifiedRadixCache on a hybrid mamba model: the FULL and MAMBA components, as upstream's scheduler builds the
tree for one (create_unified_radix_cache appends MAMBA when the model is hybrid SSM).

init_hicache's assembler picks the mamba strategy from the device pool (a
HybridLinearKVPool with the FULL and MAMBA components): a host pool group of
KV and MambaPoolHost, the MAMBA transfer one trailing state per prefetch.
"""

from dataclasses import replace

from conformance.live.layout import HostLayoutRule, Mark
from conformance.live.layouts.unified import LAYOUT as UNIFIED

MAMBA_STRATEGY = Mark("srt/mem_cache/hybrid_cache/hybrid_pool_assembler.py", r"^class _MambaStrategy\b", "mamba strategy in the unified assembler")

LAYOUT = replace(
    UNIFIED,
    key="UnifiedRadixCache+mamba",
    layout_name="the 0.5.22+ mamba build",
    session="conformance.live.layouts.unified_mamba.session:UnifiedMambaSession",
    capabilities=frozenset({"multi_rank", "pool:mamba", "kv_formats"}),
    default_extra_pools=("mamba",),
    marks=(*UNIFIED.marks, MAMBA_STRATEGY),
    # 0.5.2x's mamba host pool takes the page_first layouts only; of them the direct IO backend (the CPU path) takes
    # page_first_direct, so a mamba model's server runs with it.
    host_layout_rule=HostLayoutRule("srt/mem_cache/pool_host/mamba.py", "MambaPoolHost", r"^\s*[\"'](page_first_direct)[\"'],",
                                    "MambaPoolHost asserts a page_first host memory layout, and the direct IO backend takes"),
)
