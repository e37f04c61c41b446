"""Prefetch throughput through the full protocol vs raw readinto of the same page files.

For each prefix size, one request is written, backed up to a FileStorage in a
temporary directory and evicted from device and host. Each repetition then
runs the whole prefetch protocol: ``prefetch_from_storage`` (host slots, the
operation), the hit query and IO on the cache's threads, ``wait_prefetch_io``,
and ``check_prefetch_progress`` (terminate, fence, insert); afterwards the
committed host copy is evicted so the next repetition reads storage again.
The baseline opens and ``readinto``s the same page files (header included)
into one preallocated buffer. Files are hot in the page cache after the first
round, so this measures per-page overhead, not the disk. Throughput runs are
untraced (NullRecorder); one extra traced run per size splits a prefetch into
the submit call, the hit query, the IO and the commit call by its trace events.

    python benchmarks/bench_prefetch.py [--sizes 1024,4096,8192] [--repeats 7] [--batch-pages 16]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from caches.config import CacheConfig  # noqa: E402
from caches.core.hashing import page_hashes  # noqa: E402
from caches.hiradix import HiRadixCache  # noqa: E402
from spec.clock import MonotonicClock  # noqa: E402
from spec.trace import EventKind, TraceRecorder  # noqa: E402

PAGE_SIZE = 64
# Default KV per token: 64 KiB, what one of 8 tensor-parallel ranks holds for a
# 7B-class model (2 x 32 layers x 4096 x 2 bytes / 8). Small tokens measure
# per-call overhead instead: try --token-kib 4.
DEFAULT_TOKEN_KIB = 64
KV_ELEM = (2, DEFAULT_TOKEN_KIB * 256)  # float16: 4 bytes per element pair
GOAL_RATIO = 0.7
POLICY = "wait_complete"


def prefetch_once(cache: HiRadixCache, tokens: list[int], request_id: str) -> float:
    """The whole protocol for one request; returns seconds; leaves storage the only copy again."""
    start = time.perf_counter()
    requested = cache.prefetch_from_storage(request_id, tokens)
    cache.wait_prefetch_io(request_id)
    committed = cache.check_prefetch_progress([request_id]).get(request_id)
    elapsed = time.perf_counter() - start
    if requested != len(tokens) or committed != len(tokens):
        raise RuntimeError(f"prefetch of {len(tokens)} tokens requested {requested}, committed {committed}")
    cache.evict_host(cache.tree.host_tokens())
    return elapsed


def raw_readinto(paths: list[str], buffer: bytearray, file_bytes: int) -> float:
    view = memoryview(buffer)
    start = time.perf_counter()
    for index, path in enumerate(paths):
        with open(path, "rb", buffering=0) as f:
            f.readinto(view[index * file_bytes : (index + 1) * file_bytes])
    return time.perf_counter() - start


def breakdown(cache: HiRadixCache, tokens: list[int]) -> dict[str, float]:
    """One traced prefetch, split: the submit call, the hit query, the IO, the commit call (seconds)."""
    trace = cache.trace
    clock = trace.clock
    before = len(trace.events())
    start = clock.now()
    cache.prefetch_from_storage("traced", tokens)
    submitted = clock.now()
    cache.wait_prefetch_io("traced")
    checking = clock.now()
    cache.check_prefetch_progress(["traced"])
    committed = clock.now()
    events = trace.events()[before:]
    hit = next(e.t for e in events if e.kind is EventKind.HIT)
    io_done = next(e.t for e in events if e.kind is EventKind.IO_DONE)
    cache.evict_host(cache.tree.host_tokens())
    return {"submit": submitted - start, "hit_query": hit - submitted, "io": io_done - hit, "commit": committed - checking}


def run(sizes: list[int], repeats: int, batch_pages: int) -> list[dict[str, float]]:
    max_pages = max(sizes) // PAGE_SIZE + 1
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-prefetch-") as tmp:
        def config(name: str) -> CacheConfig:
            return CacheConfig(
                page_size=PAGE_SIZE, device_pages=max_pages, host_pages=max_pages, kv_elem_shape=KV_ELEM,
                dtype="float16", storage_path=str(Path(tmp) / name), storage_batch_pages=batch_pages,
                prefetch_policy=POLICY, prefetch_capacity_tokens=max_pages * PAGE_SIZE, wait_timeout_s=60.0,
            )

        with HiRadixCache(config("plain")) as cache, HiRadixCache(config("traced"), trace=TraceRecorder(MonotonicClock())) as traced:
            bytes_per_token = cache.device_pools["kv"].spec.bytes_per_slot
            for index, size in enumerate(sizes):
                tokens = [index * 1_000_000 + i for i in range(size)]
                data = {"kv": torch.randn(size, *KV_ELEM).to(torch.float16)}
                for c in (cache, traced):
                    c.write(tokens, data)
                    c.evict_all()  # flushes to storage first, then empties device and host
                timings = [prefetch_once(cache, tokens, f"r{index}-{rep}") for rep in range(repeats + 1)][1:]
                paths = [str(cache.storage.path_for(h)) for h in page_hashes(tokens, PAGE_SIZE)]
                file_bytes = Path(paths[0]).stat().st_size
                buffer = bytearray(file_bytes * len(paths))
                raw = [raw_readinto(paths, buffer, file_bytes) for _ in range(repeats + 1)][1:]
                parts = breakdown(traced, tokens)
                num_bytes = size * bytes_per_token
                rows.append({
                    "tokens": size,
                    "mib": num_bytes / 2**20,
                    "prefetch": num_bytes / statistics.median(timings),
                    "raw": num_bytes / statistics.median(raw),
                    **parts,
                })
    for row in rows:
        row["ratio"] = row["prefetch"] / row["raw"]
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="256,1024,2048", help="prefix sizes in tokens (multiples of 64)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--token-kib", type=int, default=DEFAULT_TOKEN_KIB, help="KV bytes per token, in KiB")
    parser.add_argument("--batch-pages", type=int, default=16, help="pages per IO batch (storage_batch_pages)")
    args = parser.parse_args(argv)
    if args.token_kib <= 0:
        parser.error(f"invalid --token-kib: {args.token_kib} (accepted: an integer > 0)")
    global KV_ELEM
    KV_ELEM = (2, args.token_kib * 256)
    sizes = [int(s) for s in args.sizes.split(",")]
    bad = [s for s in sizes if s <= 0 or s % PAGE_SIZE]
    if bad:
        parser.error(f"--sizes: {bad} are not positive multiples of the page size {PAGE_SIZE}")
    rows = run(sizes, args.repeats, args.batch_pages)
    print(f"prefetch from files, policy {POLICY} (kv {KV_ELEM} float16, page {PAGE_SIZE} tokens, "
          f"batch {args.batch_pages} pages, median of {args.repeats})")
    print(f"{'tokens':>7} {'MiB':>6} {'prefetch GiB/s':>15} {'readinto GiB/s':>15} {'ratio':>6} |"
          f" traced run, ms: {'submit':>7} {'hit':>7} {'io':>7} {'commit':>7}")
    for row in rows:
        print(f"{row['tokens']:>7} {row['mib']:>6.1f} {row['prefetch'] / 2**30:>15.2f} {row['raw'] / 2**30:>15.2f} {row['ratio']:>6.2f} |"
              f" {'':>15} {row['submit'] * 1e3:>7.2f} {row['hit_query'] * 1e3:>7.2f} {row['io'] * 1e3:>7.2f} {row['commit'] * 1e3:>7.2f}")
    worst = min(row["ratio"] for row in rows)
    print(f"worst ratio {worst:.2f} (goal >= {GOAL_RATIO}){'' if worst >= GOAL_RATIO else ': BELOW GOAL'}")
    return 0 if worst >= GOAL_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
