"""The fork's HiMambaRadixCache: full-attention KV and one mamba state per prefix end (TRAILING_PAGES, a host slot of its own)."""

from conformance.live.layout import HostLayoutRule, Layout

LAYOUT = Layout(
    key="HiMambaRadixCache",
    class_name="HiMambaRadixCache",
    module_file="srt/mem_cache/hi_mamba_radix_cache.py",
    layout_name="the fork's layout",
    session="conformance.live.layouts.hi_mamba.session:HiMambaSession",
    modules={
        "hi_mamba_radix_cache": "sglang.srt.mem_cache.hi_mamba_radix_cache",
        "hybrid_cache_controller": "sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller",
        "mamba_utils": "sglang.srt.configs.mamba_utils",
    },
    capabilities=frozenset({"multi_rank", "pool:mamba", "kv_formats"}),
    default_extra_pools=("mamba",),
    # 0.5.14-0.5.15: the mamba host pool takes one host memory layout only, so a mamba model's server runs with it.
    host_layout_rule=HostLayoutRule("srt/mem_cache/memory_pool_host.py", "MambaPoolHost", r"if layout != [\"'](\w+)[\"']:",
                                    "MambaPoolHost refuses every other host memory layout"),
)
