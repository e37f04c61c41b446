"""The fork's HiRadixCache on a DSA model's KV: MLA latent KV and the DSA indexer, an ALL_PAGES pool on the KV host slots.

Upstream builds it through its own assembler (attach_hybrid_dsa_pool_to_hiradix_cache:
a HybridCacheController, a host pool group of KV and DSAIndexerPoolHost, the
INDEXER transfer with indices_from_pool=KV) whenever the device pool is a
DSATokenToKVPool; that pool fixes the page size (its assert), so the build
runs at the page size the tree's code demands. Before upstream's rename of
NSA to DSA (2026-05) the same build is spelled NSATokenToKVPool,
NSAIndexerPoolHost and attach_hybrid_nsa_pool_to_hiradix_cache (at first
build_nsa_hybrid_stack): each mark names both spellings, and the session
takes whichever class the tree defines.
"""

from conformance.live.layout import IoOrderRule, Layout, Mark, Module, PageSizeRule
from conformance.live.layouts.hiradix import FORK_PREFETCH

# What every DSA build of HiRadixCache is made of (the host indexer pool's module moved between releases); each pattern
# names the class as upstream spelled it after its rename of NSA to DSA and before it.
DSA_POOL = Mark("srt/mem_cache/memory_pool.py", r"^class (?:DSA|NSA)TokenToKVPool\b", "DSATokenToKVPool (NSATokenToKVPool before the rename)")
DSA_ASSEMBLER = Mark("srt/mem_cache/hybrid_cache/hybrid_pool_assembler.py",
                     r"^def (?:attach_hybrid_(?:dsa|nsa)_pool_to_hiradix_cache|build_(?:dsa|nsa)_hybrid_stack)\b",
                     "attach_hybrid_dsa_pool_to_hiradix_cache (the DSA assembler; build_nsa_hybrid_stack at first)")
# The release lines after the fork read each KV batch's KV-derived pages (the indexer) right after its KV.
SIDECAR_PER_KV_BATCH = IoOrderRule("srt/managers/cache_controller.py", "HiCacheController", r"^\s*def _page_transfer_kv_batch\b",
                                   "HiCacheController reads a KV batch and its KV-derived pools together")
DSA_BRANCH = Mark("srt/mem_cache/hiradix_cache.py", r"isinstance\(self\.kv_cache, (?:DSA|NSA)TokenToKVPool\)", "DSA branch in HiRadixCache")
# The indexer's host pool, in memory_pool_host.py until the host pools moved to pool_host/ (0.5.19).
FORK_INDEXER_HOST = Mark("srt/mem_cache/memory_pool_host.py", r"^class (?:DSA|NSA)IndexerPoolHost\b",
                         "DSAIndexerPoolHost (NSAIndexerPoolHost before the rename)")
DSA_POOL_ASSERTS_PAGE = PageSizeRule("srt/mem_cache/memory_pool.py", "(?:DSA|NSA)TokenToKVPool", r"assert self\.page_size == (\d+)\s*$",
                                     "DSATokenToKVPool asserts its page size")

LAYOUT = Layout(
    key="HiRadixCache+dsa",
    class_name="HiRadixCache",
    module_file="srt/mem_cache/hiradix_cache.py",
    layout_name="the fork's DSA build",
    session="conformance.live.layouts.hiradix_dsa.session:HiRadixDsaSession",
    modules={
        "hiradix_cache": Module("sglang.srt.mem_cache.hiradix_cache", "HiRadixCache"),
        "hybrid_cache_controller": Module("sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller", "HybridCacheController"),
    },
    capabilities=frozenset({"multi_rank", "pool:indexer"}),
    default_extra_pools=("indexer",),
    kv_rank_replicated=True,
    marks=(
        FORK_PREFETCH, DSA_POOL, DSA_ASSEMBLER,
        FORK_INDEXER_HOST, DSA_BRANCH,
    ),
    page_size_rule=DSA_POOL_ASSERTS_PAGE,
)
