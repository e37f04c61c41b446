"""The fork's UnifiedRadixCache on a hybrid mamba model: the FULL and MAMBA components, the tree the fork's scheduler
builds for a hybrid SSM model with HiCache on (registry: "HybridModel launches HiCache via UnifiedRadixCache by default").

init_hicache's assembler picks the mamba strategy from the device pool (a
HybridLinearKVPool with the FULL and MAMBA components): a host pool group of
KV and MambaPoolHost; the MAMBA component adds one trailing state per prefetch.
"""

from dataclasses import replace

from conformance.live.layout import Module
from conformance.live.layouts.hi_mamba import LAYOUT as HI_MAMBA
from conformance.live.layouts.unified_fork import LAYOUT as FORK_UNIFIED
from conformance.live.layouts.unified_mamba import MAMBA_STRATEGY

LAYOUT = replace(
    FORK_UNIFIED,
    key="UnifiedRadixCache+mamba/fork",
    layout_name="the fork's mamba build",
    session="conformance.live.layouts.unified_fork_mamba.session:ForkUnifiedMambaSession",
    modules={**FORK_UNIFIED.modules, "mamba_utils": Module("sglang.srt.configs.mamba_utils", "Mamba2CacheParams")},
    capabilities=frozenset({"multi_rank", "pool:mamba", "kv_formats"}),
    default_extra_pools=("mamba",),
    marks=(*FORK_UNIFIED.marks, MAMBA_STRATEGY),
    host_layout_rule=HI_MAMBA.host_layout_rule,  # the same MambaPoolHost as HiMambaRadixCache's
)
