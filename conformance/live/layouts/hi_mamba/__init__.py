"""The fork's HiMambaRadixCache: full-attention KV and one mamba state per prefix end (TRAILING_PAGES, a host slot of its own)."""

from conformance.live.layout import HostLayoutRule, Layout, Module

LAYOUT = Layout(
    key="HiMambaRadixCache",
    class_name="HiMambaRadixCache",
    module_file="srt/mem_cache/hi_mamba_radix_cache.py",
    layout_name="the fork's layout",
    session="conformance.live.layouts.hi_mamba.session:HiMambaSession",
    modules={
        "hi_mamba_radix_cache": Module("sglang.srt.mem_cache.hi_mamba_radix_cache", "HiMambaRadixCache"),
        "hybrid_cache_controller": Module("sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller", "HybridCacheController"),
        "mamba_utils": Module("sglang.srt.configs.mamba_utils", "Mamba2CacheParams"),
        "pool_host_mha": Module("sglang.srt.mem_cache.pool_host.mha", "MHATokenToKVPoolHost")},
    # The MHA host pool: memory_pool_host's until it moved to pool_host/mha.py (found by its class, conformance/live/modules.py).
    host_pool_modules=("memory_pool_host", "pool_host_mha"),
    capabilities=frozenset({"multi_rank", "pool:mamba", "kv_formats"}),
    default_extra_pools=("mamba",),
    # 0.5.14-0.5.15: the mamba host pool takes one host memory layout only, so a mamba model's server runs with it;
    # 0.5.16-0.5.17: it asserts a list of page-first layouts, of which page_first_direct is the direct IO backend's.
    host_layout_rule=HostLayoutRule("srt/mem_cache/memory_pool_host.py", "MambaPoolHost",
                                    r"if layout != [\"'](\w+)[\"']:|^\s*[\"'](page_first_direct)[\"'],?\s*$",
                                    "MambaPoolHost refuses every other host memory layout"),
)
