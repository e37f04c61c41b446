"""HiRadixCache of the copy-thread layout: the fork's session, with copies on the controller's write and load threads.

What it shares with the fork's (HiRadixSession): the cache built as the
tree's scheduler builds it, the prefetch queue, the vote, terminate and commit
inside check_prefetch_progress. What differs (taps.py): a load-back is copied
by the load thread once ready_to_load_host_cache wakes it, so the session
waits (bounded) for the thread's acknowledgement before reading the device
rows, as the model's forward waits for its layers; a write-through is
acknowledged by the write thread, which wakes a flush; the IO thread's get
and set are the ones the tree's controller picks; a batch _page_transfer fixes
is split into the test's; the vote is read off a MIN of [vote] where the tree
reduces it so.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import torch

from conformance.live import calls, evidence, shims
from conformance.live.layouts.hiradix.session import HiRadixSession, configure  # noqa: F401  (configure: the adapter's C1/C2 entry)
from conformance.live.layouts.hiradix_threads import LAYOUT
from conformance.live.layouts.hiradix_threads.taps import CopyThreadsTaps, MinVotes, WholeTransferTaps, batch_functions
from conformance.live.taps import KV
from conformance.live.taps.cache import Votes, tap_fork_cache
from conformance.live.taps.controller import tap_backup, tap_load_path, tap_queue, tap_revoke_queue, tap_terminate
from conformance.live.taps.host import tap_host_pool
from conformance.live.taps.storage import tap_storage
from conformance.live.threads import FORK_THREADS

CAPACITY_SHARE_INVERSE = 1.25  # 1 / 0.8, the share of host minus device room upstream lets prefetches hold
LOAD_THREAD = "load_thread"  # its loop catches nothing: an exception in a load-back copy ends it


class CopyThreadsSession(HiRadixSession):
    """One upstream HiRadixCache of the copy-thread layout for one test."""

    THREADS = (*FORK_THREADS, LOAD_THREAD)

    def prefetch_headroom_pages(self) -> int:
        """Its prefetch thread revokes a prefetch once the tokens in flight, its own included, reach 0.8 x (host - device)
        (prefetch_capacity_limit; the thread then dies on the hit it never counted, 2025-08): at the harness's host tier of
        one page more than the device's, every prefetch. The host tier is made larger by more than the test's own room,
        the excess held as other requests' data, so the cap binds only where a deployment's would."""
        return math.ceil(CAPACITY_SHARE_INVERSE * self.env.host_pages) + 1

    def tap(self) -> None:
        self.storage_on_next_hit = (evidence.find(self.runtime.tree, LAYOUT.module_file, r"write_backup_storage\(", within="writing_check") is None
                                    and evidence.find(self.runtime.tree, LAYOUT.module_file, r"write_backup_storage\(", within="inc_hit_count") is not None)
        self.served: list[tuple[list[int], Mapping[str, torch.Tensor]]] = []
        tap_host_pool(self.taps, self.kv_host, KV)
        for tap_point in (tap_queue, tap_revoke_queue, tap_terminate):
            tap_point(self.taps, self.cc)
        tap_storage(self.taps, self.backend, self.storage_file_name)
        if hasattr(self.cc, "_page_transfer"):
            get_func, set_func = batch_functions(self.cc)
            tap_load_path(self.taps, self.cc, get_func, done_at_return=evidence.io_thread_barrier_of(self.runtime.tree) is not None)
            if evidence.fixed_batch_of(self.runtime.tree) is not None:  # the storage-batch-size shim, where the batch is fixed
                shims.split_fixed_batch(self.cc, get_func, self.env.batch_pages)
            tap_backup(self.taps, self.cc, set_func)
        else:  # 0.5.0/0.5.1: one call moves a whole operation
            WholeTransferTaps(self.taps, self.cc, self.env.batch_pages).install()
        op, _ = evidence.vote_reduce_of(self.runtime.tree, self.CLASS_NAME)
        tap_fork_cache(self.taps, self.cache, self.decision_state, MinVotes if op == "MIN" else Votes)
        self.copies = CopyThreadsTaps(self.taps, self.cc)
        self.copies.install()

    def _tap_backup_acks(self) -> None:
        self._acked = self.copies.acked  # a write-through's ack wakes a flush, as a backup's does
        super()._tap_backup_acks()

    def write(self, tokens: Sequence[int], data: Mapping[str, torch.Tensor]) -> None:
        __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
        super().write(tokens, data)
        if self.storage_on_next_hit:
            self.served.append((list(tokens), data))

    def flush(self) -> None:
        """Where the tree backs a host copy up to storage only on its node's next hit (inc_hit_count; later trees do it in
        writing_check once the copy is acknowledged), each request written since the last flush is served once more, as
        the scheduler serves a repeated prompt, once its host copy is acknowledged; then every backup settles."""
        __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
        super().flush()
        served, self.served = self.served, []
        for tokens, data in served:
            super().write(tokens, data)
        if served:
            super().flush()

    def _load_host_part(self, m: Any) -> None:
        __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
        super()._load_host_part(m)
        loading = {int(node_id) for node_id in self.cache.ongoing_load_back}
        if loading and not self.copies.wait_loads(loading, self.env.wait_timeout_s, lambda: self.storage_threads.alive(LOAD_THREAD)):
            dead = self.background_errors_now()
            if dead:
                raise AssertionError("sglang-live load-back: " + "; ".join(dead))
            raise AssertionError(f"L4: sglang-live: upstream's load thread did not finish the load-back of nodes {sorted(loading)} "
                                 f"within {self.env.wait_timeout_s}s (load thread alive: {self.storage_threads.alive(LOAD_THREAD)})")

    def shutdown(self) -> None:
        """The storage threads stopped as the cache's reset stops them; the load thread woken to see the stop."""
        calls.shutdown(self.cache, self.env.wait_timeout_s)
        load_thread = getattr(self.cc, LOAD_THREAD, None)
        if load_thread is not None:
            self.cache.load_cache_event.set()
            load_thread.join(self.env.wait_timeout_s)
