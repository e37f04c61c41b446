"""0.5.22-0.5.23's UnifiedRadixCache (the ACK drain with allocate_storage_hit; 0.5.21 allocates another way), on its
full-attention component.

The fork's earlier UnifiedRadixCache has neither a tree core nor a runtime
context: its own layout (layouts/unified_fork).
"""

from conformance.live.layout import Layout, Mark, Module

# 0.5.22+: the drain allocates a hit through the controller (0.5.20/0.5.21 allocate it inline: layouts/unified_inline).
ALLOCATE_STORAGE_HIT = Mark("srt/mem_cache/hybrid_cache/hybrid_cache_controller.py", r"def allocate_storage_hit\b",
                            "allocate_storage_hit (the 0.5.22+ drain)")

LAYOUT = Layout(
    key="UnifiedRadixCache",
    class_name="UnifiedRadixCache",
    module_file="srt/mem_cache/unified_radix_cache.py",
    layout_name="the 0.5.22+ layout",
    session="conformance.live.layouts.unified.session:UnifiedSession",
    modules={
        "unified_radix_cache": Module("sglang.srt.mem_cache.unified_radix_cache", "UnifiedRadixCache"),
        "hybrid_cache_controller": Module("sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller", "HybridCacheController"),
        "runtime_context": Module("sglang.srt.runtime_context", "publish"),
        "components": Module("sglang.srt.mem_cache.unified_cache.components", "ComponentType"),
        "pool_host_mha": Module("sglang.srt.mem_cache.pool_host.mha", "MHATokenToKVPoolHost"),
        "pool_host_mamba": Module("sglang.srt.mem_cache.pool_host.mamba", "MambaPoolHost"),
        "mamba_utils": Module("sglang.srt.configs.mamba_utils", "Mamba2CacheParams"),
        "schedule_batch": Module("sglang.srt.managers.schedule_batch", "Req"),
        "sampling_params": Module("sglang.srt.sampling.sampling_params", "SamplingParams"),
    },
    capabilities=frozenset({"multi_rank", "kv_formats"}),
    marks=(
        Mark("srt/mem_cache/unified_cache/unified_tree_core.py", None, "tree core"),
        Mark("srt/runtime_context.py", None, "runtime context"),
        ALLOCATE_STORAGE_HIT,
    ),
    host_pool_modules=("pool_host_mha", "pool_host_mamba"),
)
