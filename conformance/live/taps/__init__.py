"""Record the spec's trace from upstream's real objects, by wrapping their methods at run time, one module per seam.

  state.py       what every seam's taps share (the trace, per-thread context, slot owners, IO waiters)
  host.py        host pools: alloc/free, a state attached to a new leaf
  controller.py  the prefetch queue, the IO thread's storage batches, the backup thread, terminate, copies
  storage.py     the backend: page writes, one IO per pool transfer of a multi-pool get or set
  cache.py       the vote and every collective, the commit and what it inserts

Every wrapper calls the original; none changes what it does. Where each
event is recorded on the fork's classes is TAP_POINTS (docs/upstream.md
mirrors it); a layout that records elsewhere keeps its own table beside its
taps (conformance/live/layouts/unified/taps.py).
"""

from conformance.live.taps.state import KV, TREE, Taps, tensor_digest, wrap

TAP_POINTS = (
    ("op_start", "cache_controller.prefetch_queue.put (the operation is queued)"),
    ("alloc / free", "alloc / free of each host pool (KV, and the mamba state pool), owner: the operation in scheduler context, else the tree"),
    ("hit, io_done", "cache_controller._page_transfer entry, and the IO thread's release of the unused tail after it (io_done)"),
    ("revoke", "cache_controller.prefetch_revoke_queue.put (prefetch thread), release_aborted_request (abort)"),
    ("io_start / io_end (load)", "cache_controller.page_get_func around each storage batch (IO thread); the gate sits before the storage call"),
    ("io_start / io_end (backup)", "cache_controller.page_set_func around each storage batch (backup thread)"),
    ("io_start / io_end (extra pools)", "storage_backend.batch_get_v2 (IO thread, after the KV batches) and batch_set_v2 (backup thread), one IO per pool transfer"),
    ("page_write", "storage_backend.set (the page's file name is its key; a key '<hash>.<pool>' is that pool's page)"),
    ("io_start / io_end (copies)", "cache_controller.start_writing / start_loading (device<->host copies)"),
    ("vote, collective", "HiRadixCache._all_reduce_attn_groups, or torch.distributed.all_reduce as HiMambaRadixCache calls it, inside can_terminate_prefetch; "
                         "without a reduce (best_effort; one rank of HiMambaRadixCache) the vote is recorded at the return"),
    ("collective (barrier)", "HiRadixCache._barrier_attn_groups, or torch.distributed.barrier as HiMambaRadixCache calls it (release_aborted_request)"),
    ("terminate", "cache_controller.terminate_prefetch inside check_prefetch_progress"),
    ("commit, insert", "_insert_helper_host inside check_prefetch_progress (and the mamba state it attaches to the new leaf)"),
)

__all__ = ["KV", "TAP_POINTS", "TREE", "Taps", "tensor_digest", "wrap"]
