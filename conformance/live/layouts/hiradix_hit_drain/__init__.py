"""HiRadixCache with the hit drain and the fork's progress (0.5.16-0.5.18's protocol), on a plain MHA KV pool.

Between the fork and the 0.5.19 ACK drain: the prefetch thread only queries
storage; the scheduler's drain (check_hicache_events) allocates the hit's host
slots and hands the operation to the IO thread; the IO thread then writes
completed_tokens on the operation itself, as the fork's does, and
check_prefetch_progress votes (one MAX reduce of [not vote, terminated]),
terminates and commits. No progress ACK, no sync thread.
"""

from conformance.live.layout import Layout, Mark
from conformance.live.layouts.hiradix import LAYOUT as FORK
from conformance.live.layouts.hiradix_drain import DRAIN

NO_ACKS = Mark("srt/mem_cache/hiradix_cache.py", r"\back_prefetch_queue\b", "progress ACKs (ack_prefetch_queue)", absent=True)

LAYOUT = Layout(
    key="HiRadixCache/hit-drain",
    class_name="HiRadixCache",
    module_file="srt/mem_cache/hiradix_cache.py",
    layout_name="the hit-drain layout (the drain allocates the hit, the IO thread's progress read off the operation)",
    session="conformance.live.layouts.hiradix_hit_drain.session:HitDrainSession",
    modules=FORK.modules,
    host_pool_modules=FORK.host_pool_modules,
    capabilities=frozenset({"multi_rank", "kv_formats"}),
    marks=(DRAIN, NO_ACKS),
)
