"""HiRadixCache whose controller copies device<->host on threads of its own (the fork and releases before 2025-09-08).

The prefetch protocol is the fork's (host slots allocated when a prefetch is
queued, a vote per check, terminate and commit inside check_prefetch_progress);
what differs is where upstream does its work, so the taps differ: copies run
on the controller's write and load threads, the IO thread's get is the
generic get its _page_transfer picks where the controller has no
page_get_func, a fixed batch where it has no storage_batch_size, a direct
free of the host pool where it has no append_host_mem_release, and the vote
a MIN of [vote] before 2025-09-08's MAX of [not vote, terminated]. Each is
read from the tree or its objects (session.py, taps.py).
"""

from conformance.live.layout import Layout, Mark
from conformance.live.layouts.hiradix import FORK_PREFETCH, LAYOUT as FORK, OWN_COPY_THREADS

COPY_THREADS = Mark(OWN_COPY_THREADS.file, OWN_COPY_THREADS.pattern, "device-host copies on write/load threads of its own (write_thread_func)")
# The IO thread's transfer, batch by batch (_page_transfer; 0.5.0/0.5.1: generic_page_transfer); 0.4.9's loop is page by page.
PAGE_TRANSFER = Mark("srt/managers/cache_controller.py", r"^    def (_page_transfer|generic_page_transfer)\(", "batched prefetch transfer (_page_transfer)")
DECISION = Mark("srt/mem_cache/hiradix_cache.py", r"^    def can_terminate_prefetch\(", "termination decision (can_terminate_prefetch)")

LAYOUT = Layout(
    key="HiRadixCache/copy-threads",
    class_name="HiRadixCache",
    module_file="srt/mem_cache/hiradix_cache.py",
    layout_name="the copy-thread layout (device-host copies on the controller's own threads)",
    session="conformance.live.layouts.hiradix_threads.session:CopyThreadsSession",
    modules=FORK.modules,
    host_pool_modules=FORK.host_pool_modules,
    capabilities=frozenset({"multi_rank", "kv_formats"}),
    marks=(FORK_PREFETCH, COPY_THREADS, DECISION, PAGE_TRANSFER),
)
