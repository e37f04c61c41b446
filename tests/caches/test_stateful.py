"""A seeded whole-cache stateful test: random sequences of the public API, on all three caches.

Rules: write, store (write and flush), flush, match, prefetch (its IO
awaited, so a run replays the same way; of any request or of one stored
earlier, optionally from empty device and host tiers, optionally checked at
once), check, abort, evict (device, host, all), load back, restart on the
same storage (close, then a fresh cache over the same files), corrupt a
stored page, and a refused write. Invariants after every step:

- `spec.invariants.check` over the trace of the cache's current life;
- exact slot accounting: every allocated slot has a holder (the tree, a
  backup, a prefetch operation, a free waiting on a copy) and no more;
- bytes loaded back equal the bytes written for that prefix, so a damaged
  page is never loaded; a committed prefetch is served by the next match
  unless a fault was recorded meanwhile;
- no background thread failed; close() leaves no thread.

Derandomized and without an example database, so every run (and CI) plays
the same examples: about 200 examples of up to 50 steps per cache (some
7,800 rule steps each), a few seconds per cache on two cores. Small tiers
(6 device pages, 4 host pages) make eviction, shrunk prefetches and full
tiers common.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Callable

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, precondition, rule, run_state_machine_as_test

from caches import BadTokensError, CacheFullError
from caches.registry import build
from conformance.oracles.lifecycle import close_and_check
from spec import check
from spec.clock import ManualClock
from spec.trace import TraceRecorder

PS = 2
# Requests are sequences of a few page patterns, so they share prefixes often.
REQUESTS = st.lists(st.integers(0, 3), min_size=1, max_size=4)
SETTINGS = settings(
    max_examples=200, stateful_step_count=50, derandomize=True, database=None, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def tokens_of(pages: list[int]) -> list[int]:
    return [100 * page + offset for page in pages for offset in range(PS)]


class CacheMachine(RuleBasedStateMachine):
    stored = Bundle("stored")  # requests written and flushed: storage holds them

    def __init__(self, name: str, oracle, config_for: Callable[..., dict], workdir: Path) -> None:
        super().__init__()
        self.name = name
        self.oracle = oracle
        self.config_for = config_for
        self.storage_dir = Path(tempfile.mkdtemp(prefix="storage-", dir=workdir))
        self.cache = None
        self.ongoing: dict[str, tuple[list[int], int, int]] = {}  # id -> tokens, anchor depth, faults at start
        self.next_id = 0

    # --- lifecycle -------------------------------------------------------------------------

    def _open(self) -> None:
        clock = ManualClock(1000.0)
        self.trace = TraceRecorder(clock)
        config = self.config_for(
            self.name, self.storage_dir, page_size=PS, device_pages=6, host_pages=4, state_device_slots=4,
            state_host_slots=4, kv_elem_shape=(2, 2), indexer_elem_shape=(3,), state_elem_shape=(4,),
        )
        self.cache = build(self.name, config, trace=self.trace, clock=clock)
        self.ongoing = {}

    def _close(self) -> None:
        close_and_check([self.cache])  # no thread left, no background thread failed
        assert check(self.trace.trace(), self.cache.termination, closed=True) == []

    @initialize()
    def start(self) -> None:
        self._open()

    def teardown(self) -> None:
        if self.cache is not None:
            self._close()

    def _faults(self) -> int:
        return len(self.cache.storage.faults) + len(self.cache.controller.fault_list())

    # --- rules ------------------------------------------------------------------------------

    @rule(pages=REQUESTS)
    def write(self, pages):
        tokens = tokens_of(pages)
        try:
            self.cache.write(tokens, self.oracle.data(self.cache, tokens))
        except CacheFullError:
            pass  # every device slot is pinned by a copy in flight: refused, nothing taken

    @rule(pages=REQUESTS, bad=st.sampled_from([-1, 2**32, 1.5, "7", None, True]))
    def refused_write(self, pages, bad):
        tokens = tokens_of(pages)
        before = self.cache.slot_accounting()
        with pytest.raises(BadTokensError):
            self.cache.write([*tokens[:-1], bad], self.oracle.data(self.cache, tokens))
        assert self.cache.slot_accounting() == before

    @rule(target=stored, pages=REQUESTS)
    def store(self, pages):
        """Write and flush: the request reaches storage (a prefetch can find it)."""
        self.write(pages)
        self.cache.flush()
        return pages

    @rule()
    def flush(self):
        self.cache.flush()

    @rule()
    def evict_all(self):
        self.cache.evict_all()

    @rule(pages=REQUESTS)
    def match(self, pages):
        tokens = tokens_of(pages)
        m = self.cache.match_prefix(tokens)
        assert m.matched_tokens % PS == 0 and m.matched_tokens <= len(tokens)
        assert m.matched_tokens == m.device_hit_tokens + m.host_hit_tokens

    @rule(pages=REQUESTS, cold=st.booleans(), check_now=st.booleans())
    def prefetch(self, pages, cold, check_now):
        self._prefetch(pages, cold, check_now)

    @rule(pages=stored, more=st.lists(st.integers(0, 3), max_size=2), cold=st.booleans(), check_now=st.booleans())
    def prefetch_stored(self, pages, more, cold, check_now):
        self._prefetch(pages + more, cold, check_now)

    def _prefetch(self, pages, cold, check_now):
        """cold: empty device and host first (storage is the only copy); check_now: one scheduler step after its IO."""
        if cold and not self.ongoing:
            self.cache.evict_all()
        tokens = tokens_of(pages)
        request_id = f"r{self.next_id}"
        self.next_id += 1
        faults = self._faults()
        requested = self.cache.prefetch_from_storage(request_id, tokens)
        assert requested % PS == 0 and requested <= len(tokens)
        if requested:
            anchor = self.cache.tree.depth(self.cache.ongoing_prefetch[request_id].last_node)
            self.cache.wait_prefetch_io(request_id)
            self.ongoing[request_id] = (tokens, anchor, faults)
        if check_now:
            self.check_progress()

    @rule()
    def check_progress(self):
        ids = sorted(self.ongoing) + ["never-started"]
        done = self.cache.check_prefetch_progress(ids)
        assert "never-started" not in done
        assert set(done) == set(self.ongoing), "wait_complete: every prefetch's IO had ended"
        for request_id, committed in done.items():
            tokens, anchor, faults = self.ongoing.pop(request_id)
            assert committed % PS == 0 and anchor + committed <= len(tokens)
            if committed and self._faults() == faults:
                self._assert_served(tokens, anchor + committed)

    def _assert_served(self, tokens: list[int], end: int) -> None:
        """A committed prefetch is matched up to its end (item: no unusable hit is reported)."""
        node = self.cache.tree.match_prefix(tokens[:end]).host_node
        if node.value is not None and self.cache.state_pools:
            return  # the end is also on the device: its usability is the write's state, not the prefetch's
        served = self.cache.match_prefix(tokens).matched_tokens
        assert served >= end, f"{end} tokens committed and inserted, a match serves {served}"

    @precondition(lambda self: self.ongoing)
    @rule(data=st.data())
    def abort(self, data):
        request_id = data.draw(st.sampled_from(sorted(self.ongoing)))
        self.cache.release_aborted_request(request_id)
        del self.ongoing[request_id]

    @rule(count=st.integers(0, 12), host=st.booleans())
    def evict(self, count, host):
        (self.cache.evict_host if host else self.cache.evict)(count)

    @rule(pages=REQUESTS)
    def load_back(self, pages):
        self._load_back(pages)

    @rule(pages=stored)
    def load_back_stored(self, pages):
        self._load_back(pages)

    def _load_back(self, pages):
        tokens = tokens_of(pages)
        m = self.cache.match_prefix(tokens)
        if m.host_hit_tokens and self.cache.load_back(m.host_node) is not None:
            m = self.cache.match_prefix(tokens)
        got = self.cache.read_device(m.device_slots, state_node=m.device_node)
        length = m.device_hit_tokens
        if not length:
            return
        want = self.oracle.data(self.cache, tokens[:length])
        for pool, tensor in got.items():
            assert self.oracle.same_bytes(tensor, want[pool]), f"pool {pool}: loaded bytes of {length} tokens differ from the written ones"

    @precondition(lambda self: not self.ongoing)
    @rule()
    def restart(self):
        self._close()
        self._open()

    @rule(index=st.integers(0, 10_000))
    def corrupt_a_page(self, index):
        files = sorted(p for p in self.storage_dir.rglob("*") if p.is_file() and len(p.name) >= 64)
        if files:
            path = files[index % len(files)]
            raw = bytearray(path.read_bytes())
            raw[-1] ^= 0xA5
            path.write_bytes(bytes(raw))

    # --- invariants ---------------------------------------------------------------------------

    @invariant()
    def slots_are_accounted_exactly(self):
        if self.cache is not None:
            self.oracle.assert_exact(self.cache)

    @invariant()
    def trace_satisfies_the_spec(self):
        if self.cache is None:
            return
        assert check(self.trace.trace(), self.cache.termination, closed=False) == []
        assert self.cache.background_errors() == []


@pytest.mark.parametrize("name", ["hiradix", "unified_radix", "hi_mamba_radix"])
def test_random_api_sequences_keep_every_promise(name, oracle, cache_factory, tmp_path):
    run_state_machine_as_test(lambda: CacheMachine(name, oracle, cache_factory.settings, tmp_path), settings=SETTINGS)
