"""HiRadixCache of the 0.5.19/0.5.20 line on a DSA model's KV: the ACK drain with the indexer read per KV batch.

The same build as the fork's hiradix_dsa (upstream's DSATokenToKVPool and
its own assembler), in the release line that reads the KV-derived indexer
beside every KV batch and clamps each batch to the shorter of the two.
"""

from dataclasses import replace

from conformance.live.layout import Layout, Mark, Module
from conformance.live.layouts.hiradix_drain import DRAIN
from conformance.live.layouts.hiradix_dsa import DSA_ASSEMBLER, DSA_BRANCH, DSA_POOL, LAYOUT as FORK_DSA, SIDECAR_PER_KV_BATCH
from conformance.live.layouts.hiradix_hit_drain import NO_ACKS

# Progress ACKs tell this build from the hit-drain one (hiradix_dsa_hit_drain).
ACKS = replace(NO_ACKS, absent=False)

LAYOUT = Layout(
    key="HiRadixCache+dsa/drain",
    class_name="HiRadixCache",
    module_file="srt/mem_cache/hiradix_cache.py",
    layout_name="the 0.5.19/0.5.20 DSA build",
    session="conformance.live.layouts.hiradix_dsa_drain.session:HiRadixDrainDsaSession",
    modules={
        "hiradix_cache": Module("sglang.srt.mem_cache.hiradix_cache", "HiRadixCache"),
        "runtime_context": Module("sglang.srt.runtime_context", "publish"),
        "hybrid_cache_controller": Module("sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller", "HybridCacheController"),
        "pool_host_mla": Module("sglang.srt.mem_cache.pool_host.mla", "MLATokenToKVPoolHost"),
        "pool_host_dsa": Module("sglang.srt.mem_cache.pool_host.dsa", "DSAIndexerPoolHost"),
    },
    capabilities=FORK_DSA.capabilities,
    default_extra_pools=FORK_DSA.default_extra_pools,
    kv_rank_replicated=True,
    marks=(
        DRAIN, ACKS, DSA_POOL, DSA_ASSEMBLER,
        Mark("srt/mem_cache/pool_host/dsa.py", r"^class DSAIndexerPoolHost\b", "DSAIndexerPoolHost"),
        DSA_BRANCH,
    ),
    host_pool_modules=("pool_host_mla", "pool_host_dsa"),
    io_order_rule=SIDECAR_PER_KV_BATCH,
    page_size_rule=FORK_DSA.page_size_rule,
)
