"""The fork's HiMambaRadixCache: full-attention KV and one mamba state per prefix end (TRAILING_PAGES, a host slot of its own)."""

from conformance.live.layout import Layout

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
)
