"""0.5.2x's UnifiedRadixCache on a DSA model's KV: the full-attention component on a DSATokenToKVPool, the indexer its sidecar.

upstream's scheduler builds the tree with the FULL component alone for a DSA
model (create_unified_radix_cache); init_hicache's assembler picks the DSA
strategy from the device pool (the pool's host_pool_decls: KV and the
INDEXER, indices and layout from KV) and registers the indexer as a sidecar
pool, so its pages ride every KV transfer and every storage batch.
"""

from conformance.live.layout import Layout, Mark, Module, PageSizeRule
from conformance.live.layouts.hiradix_dsa import DSA_POOL, SIDECAR_PER_KV_BATCH
from conformance.live.layouts.unified import LAYOUT as UNIFIED

LAYOUT = Layout(
    key="UnifiedRadixCache+dsa",
    class_name="UnifiedRadixCache",
    module_file=UNIFIED.module_file,
    layout_name="the 0.5.22+ DSA build",
    session="conformance.live.layouts.unified_dsa.session:UnifiedDsaSession",
    modules={**UNIFIED.modules, "pool_host_mla": Module("sglang.srt.mem_cache.pool_host.mla", "MLATokenToKVPoolHost"), "pool_host_dsa": Module("sglang.srt.mem_cache.pool_host.dsa", "DSAIndexerPoolHost")},
    capabilities=frozenset({"multi_rank", "pool:indexer"}),
    default_extra_pools=("indexer",),
    kv_rank_replicated=True,
    marks=(
        *UNIFIED.marks, DSA_POOL,
        Mark("srt/mem_cache/hybrid_cache/hybrid_pool_assembler.py", r"^class _DsaStrategy\b", "DSA strategy in the unified assembler"),
        Mark("srt/mem_cache/pool_host/dsa.py", r"^def make_dsa_indexer_pool_decl\b", "indexer host-pool declaration"),
    ),
    host_pool_modules=("pool_host_mla", "pool_host_dsa"),
    # The indexer's physical page (page_size // index_kpool; index_kpool 1 here) is fixed on the CUDA path.
    io_order_rule=SIDECAR_PER_KV_BATCH,
    page_size_rule=PageSizeRule("srt/mem_cache/memory_pool.py", "DSATokenToKVPool", r"assert physical_page_size == (\d+)\b",
                                "DSATokenToKVPool asserts the indexer's physical page size"),
)
