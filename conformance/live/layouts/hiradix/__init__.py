"""The fork's HiRadixCache on a plain MHA KV pool: no extra pool (its one sidecar, the DSA indexer, is hiradix_dsa's build)."""

from conformance.live.layout import Layout, Mark, Module

# The fork's HiRadixCache allocates a prefetch's host slots when it is queued and votes each check itself; the
# 0.5.19/0.5.20 line allocates them in the scheduler's ACK drain (the hiradix_drain layout).
FORK_PREFETCH = Mark("srt/mem_cache/hiradix_cache.py", r"_drain_and_alloc_storage_hit", "ACK drain (_drain_and_alloc_storage_hit)", absent=True)
# Before 2025-09 the controller copied device<->host on write and load threads of its own, which no tap of the harness
# observes; since, the scheduler's own start_writing/start_loading copy, where the copy taps look.
OWN_COPY_THREADS = Mark("srt/managers/cache_controller.py", r"def (write_thread_func|load_thread_func)\w*\(",
                        "device-host copies on write/load threads of its own (no scheduler start_writing the copy taps observe)",
                        absent=True)

LAYOUT = Layout(
    key="HiRadixCache",
    class_name="HiRadixCache",
    module_file="srt/mem_cache/hiradix_cache.py",
    layout_name="the fork's layout",
    session="conformance.live.layouts.hiradix.session:HiRadixSession",
    modules={"hiradix_cache": Module("sglang.srt.mem_cache.hiradix_cache", "HiRadixCache"),
        "pool_host_mha": Module("sglang.srt.mem_cache.pool_host.mha", "MHATokenToKVPoolHost")},
    # The MHA host pool: memory_pool_host's until it moved to pool_host/mha.py (found by its class, conformance/live/modules.py).
    host_pool_modules=("memory_pool_host", "pool_host_mha"),
    capabilities=frozenset({"multi_rank", "kv_formats"}),
    marks=(FORK_PREFETCH, OWN_COPY_THREADS),
)
