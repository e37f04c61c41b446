"""HiRadixCache of the hit-drain layout (0.5.16-0.5.18's protocol) on a DSA model's KV: the drain allocates the hit,
the IO thread's progress is read off the operation, the indexer rides the KV host slots.

The same build as the fork's hiradix_dsa (upstream's DSA device pool and its own
assembler), under the hit-drain protocol of hiradix_hit_drain.
"""

from conformance.live.layout import Layout, Module
from conformance.live.layouts.hiradix_drain import DRAIN
from conformance.live.layouts.hiradix_dsa import (DSA_ASSEMBLER, DSA_BRANCH, DSA_POOL, FORK_INDEXER_HOST, LAYOUT as FORK_DSA,
                                              SIDECAR_PER_KV_BATCH)
from conformance.live.layouts.hiradix_hit_drain import NO_ACKS

LAYOUT = Layout(
    key="HiRadixCache+dsa/hit-drain",
    class_name="HiRadixCache",
    module_file="srt/mem_cache/hiradix_cache.py",
    layout_name="the hit-drain DSA build",
    session="conformance.live.layouts.hiradix_dsa_hit_drain.session:HitDrainDsaSession",
    # The MLA host pool moved to pool_host/mla.py while the indexer's stayed in memory_pool_host.py: both copy on CPU.
    modules={**FORK_DSA.modules, "pool_host_mla": Module("sglang.srt.mem_cache.pool_host.mla", "MLATokenToKVPoolHost")},
    capabilities=FORK_DSA.capabilities,
    default_extra_pools=FORK_DSA.default_extra_pools,
    kv_rank_replicated=True,
    marks=(
        DRAIN, NO_ACKS, DSA_POOL, DSA_ASSEMBLER,
        FORK_INDEXER_HOST, DSA_BRANCH,
    ),
    host_pool_modules=("memory_pool_host", "pool_host_mla"),
    io_order_rule=SIDECAR_PER_KV_BATCH,
    page_size_rule=FORK_DSA.page_size_rule,
)
