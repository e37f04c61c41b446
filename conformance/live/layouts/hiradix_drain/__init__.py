"""HiRadixCache of the 0.5.19/0.5.20 release line: the ACK drain, on a plain MHA KV pool.

Between the fork and the unification: the prefetch thread only queries
storage; the scheduler's drain (check_hicache_events) allocates the hit's
host slots and hands the operation to the IO thread, whose progress comes
back as ACKs a sync thread MIN-reduces across ranks; the drain commits at the
final ACK. can_terminate_prefetch decides the policy alone, and
check_prefetch_progress MAX-reduces it with the terminated flag; a commit is
clamped to the shortest hit over KV and its KV-derived sidecars. 0.5.19 names
requests by id, 0.5.20 by CacheRequestHandle.
"""

from conformance.live.layout import Layout, Mark, Module

DRAIN = Mark("srt/mem_cache/hiradix_cache.py", r"_drain_and_alloc_storage_hit", "ACK drain (_drain_and_alloc_storage_hit)")

LAYOUT = Layout(
    key="HiRadixCache/drain",
    class_name="HiRadixCache",
    module_file="srt/mem_cache/hiradix_cache.py",
    layout_name="the 0.5.19/0.5.20 layout",
    session="conformance.live.layouts.hiradix_drain.session:HiRadixDrainSession",
    modules={
        "hiradix_cache": Module("sglang.srt.mem_cache.hiradix_cache", "HiRadixCache"),
        "runtime_context": Module("sglang.srt.runtime_context", "publish"),
        "pool_host_mha": Module("sglang.srt.mem_cache.pool_host.mha", "MHATokenToKVPoolHost"),
    },
    capabilities=frozenset({"multi_rank", "kv_formats"}),
    marks=(DRAIN, Mark("srt/runtime_context.py", r"^def publish\b", "runtime context (publish)"),
           Mark("srt/mem_cache/hiradix_cache.py", r"\back_prefetch_queue\b", "progress ACKs (ack_prefetch_queue)")),
    host_pool_modules=("pool_host_mha",),
)
