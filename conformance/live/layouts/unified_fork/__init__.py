"""The fork's UnifiedRadixCache (also in 0.5.13-0.5.18): a tree of components over the fork's prefetch protocol, on
its full-attention component.

The tree is built from CacheInitParams' tree_components (unified_cache_components,
no tree core, no runtime context), init_hicache attaches the host stack
through the hybrid assembler (HostPoolGroup, HybridCacheController,
HiCacheFile); the prefetch is the fork's: host slots allocated when it is
queued, check_prefetch_progress(req_id) votes and commits, release_aborted_request.
0.5.19+ replaced it with the tree-core layout (layouts/unified).
"""

from conformance.live.layout import Layout, Mark, Module

COMPONENT_PACKAGE = Mark("srt/mem_cache/unified_cache_components/full_component.py", None,
                         "component package (unified_cache_components)")
FORK_UNIFIED_PREFETCH = Mark("srt/mem_cache/unified_radix_cache.py", r"^\s*def check_prefetch_progress\(self, req_id: str\)",
                             "check_prefetch_progress taking a request id (the fork's prefetch)")

LAYOUT = Layout(
    key="UnifiedRadixCache/fork",
    class_name="UnifiedRadixCache",
    module_file="srt/mem_cache/unified_radix_cache.py",
    layout_name="the fork's layout",
    session="conformance.live.layouts.unified_fork.session:ForkUnifiedSession",
    modules={
        "unified_radix_cache": Module("sglang.srt.mem_cache.unified_radix_cache", "UnifiedRadixCache"),
        "hybrid_cache_controller": Module("sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller", "HybridCacheController"),
        "tree_component": Module("sglang.srt.mem_cache.unified_cache_components.tree_component", "ComponentType"),
        "schedule_batch": Module("sglang.srt.managers.schedule_batch", "Req"),
        "sampling_params": Module("sglang.srt.sampling.sampling_params", "SamplingParams"),
        "pool_host_mha": Module("sglang.srt.mem_cache.pool_host.mha", "MHATokenToKVPoolHost")},
    # The MHA host pool: memory_pool_host's until it moved to pool_host/mha.py (found by its class, conformance/live/modules.py).
    host_pool_modules=("memory_pool_host", "pool_host_mha"),
    capabilities=frozenset({"multi_rank", "kv_formats"}),
    marks=(COMPONENT_PACKAGE, FORK_UNIFIED_PREFETCH),
)
