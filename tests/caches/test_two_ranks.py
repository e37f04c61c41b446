"""Two real ranks over gloo on loopback, end to end, for every built-in cache.

Each rank writes its own shard of one request, backs it up to its storage,
empties its tiers and closes the cache; a fresh cache on the same storage then
prefetches the request, commits it, loads it back and reads the device bytes.
Both ranks must commit the same length, read back exactly the bytes they
wrote, and leave no thread behind; the two ranks' traces must satisfy the spec.

One launch for all caches (conformance/multirank/processes.py: the parent
hosts the TCP store, the ranks come from a forkserver that imported torch).
"""

from __future__ import annotations

import pytest

from conformance.bounds import WAIT_S
from conformance.multirank.processes import run_ranks
from conformance.scenarios.workload import pool_data

CACHES = {"hiradix": ("indexer",), "unified_radix": ("indexer", "mamba"), "hi_mamba_radix": ("mamba",)}
PAGE_SIZE = 4
TOKENS = list(range(101, 101 + 4 * PAGE_SIZE))
LAUNCH_TIMEOUT_S = 120.0


# --- a rank ----------------------------------------------------------------


def round_trip(env) -> dict:
    """One rank: every cache's write, backup, fresh prefetch and load-back; what it saw, by cache name."""
    import threading

    import torch

    from caches.config import CacheConfig
    from caches.registry import build
    from spec.clock import ManualClock
    from spec.trace import TraceRecorder

    rank, workdir = env.rank, env.workdir
    results = {}
    for name, extra in CACHES.items():
        config = CacheConfig(
            page_size=PAGE_SIZE, device_pages=16, host_pages=16, state_device_slots=8, state_host_slots=8,
            kv_elem_shape=(2, 3), indexer_elem_shape=(3,), state_elem_shape=(5,), extra_pools=extra,
            prefetch_policy="wait_complete", storage_backend="file", storage_path=str(workdir / name),
            storage_batch_pages=2, wait_timeout_s=WAIT_S,
        )

        def make(trace):
            clock = ManualClock(100.0)
            return build(name, config, trace=trace, clock=clock, process_group=env.group)

        writer_trace = TraceRecorder(ManualClock(100.0), rank=rank)
        writer = make(writer_trace)
        data = pool_data(writer.specs, len(TOKENS), 1000 + rank)  # ranks hold different shards of one prefix
        writer.write(TOKENS, data)
        writer.flush()
        writer.evict_all()
        writer.close()
        leftover = [t.name for t in writer.threads() if t.is_alive()]

        trace = TraceRecorder(ManualClock(100.0), rank=rank)
        reader = make(trace)
        before = reader.match_prefix(TOKENS)
        requested = reader.prefetch_from_storage("r1", TOKENS)
        reader.wait_prefetch_io("r1")
        committed = reader.check_prefetch_progress(["r1"])  # wait_complete, IO done on both ranks: one step
        match = reader.match_prefix(TOKENS)
        if match.host_hit_tokens:
            reader.load_back(match.host_node)
            match = reader.match_prefix(TOKENS)
        loaded = reader.read_device(match.device_slots, state_node=match.device_node)
        mismatched = []
        for pool, want in data.items():
            got = loaded.get(pool)
            if got is None or not torch.equal(got.view(torch.uint8), want[: got.shape[0]].view(torch.uint8)) or got.shape[0] != want.shape[0]:
                mismatched.append(pool)
        reader.close()
        leftover += [t.name for t in reader.threads() if t.is_alive()]
        results[name] = {
            "before": (before.device_hit_tokens, before.host_hit_tokens),
            "requested": requested,
            "committed": committed,
            "device_hit": match.device_hit_tokens,
            "mismatched": mismatched,
            "leftover": leftover,
            "trace": trace.trace(),
            "python_threads": [t.name for t in threading.enumerate() if t is not threading.main_thread()],
        }
    return results


# --- the parent ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_rank_results(tmp_path_factory):
    return run_ranks(f"{__file__}:round_trip", 2, workdir=tmp_path_factory.mktemp("two_ranks"), timeout_s=LAUNCH_TIMEOUT_S)


@pytest.mark.parametrize("name", list(CACHES))
def test_two_ranks_round_trip(two_rank_results, name):
    from spec.invariants import check

    per_rank = [results[name] for results in two_rank_results]
    full = len(TOKENS)
    for rank, r in enumerate(per_rank):
        assert r["before"] == (0, 0), f"rank {rank}: the fresh cache already matched {r['before']}"
        assert r["requested"] == full, f"rank {rank}: prefetch queued {r['requested']} tokens"
        assert r["committed"] == {"r1": full}, f"rank {rank}: committed {r['committed']}"
        assert r["device_hit"] == full, f"rank {rank}: load-back made {r['device_hit']} tokens usable"
        assert r["mismatched"] == [], f"rank {rank}: pools whose loaded bytes differ from the written ones: {r['mismatched']}"
        assert r["leftover"] == [], f"rank {rank}: threads still running after close(): {r['leftover']}"
    violations = check([r["trace"] for r in per_rank], None)
    assert violations == [], "\n".join(str(v) for v in violations[:10])


def test_ranks_leave_no_python_thread(two_rank_results):
    # Each cache's threads are gone after close(): at the end only the ranks' main threads remain.
    last = list(CACHES)[-1]
    assert [results[last]["python_threads"] for results in two_rank_results] == [[], []]

