"""Prefetch throughput through the full protocol vs raw readinto of the same page files.

Each case is one request of 4 pages (page 64 tokens) whose KV bytes per
token make it the given size (1 MiB: 4 KiB per token; 16 MiB: 64 KiB per
token). It is written, backed up to a FileStorage in a temporary directory
and evicted from device and host. Each repetition then runs the whole
prefetch protocol: ``prefetch_from_storage`` (host slots, the operation),
the hit query and IO on the cache's threads (checksums verified),
``wait_prefetch_io``, and ``check_prefetch_progress`` (terminate, fence,
insert); afterwards the committed host copy is evicted so the next
repetition reads storage again.

Two baselines read the same page files (header included) into one
preallocated buffer: one thread, and as many threads as the backend reads
with (its ``read_threads``, the files split into contiguous chunks the way
the backend splits a batch). The goal is judged against the faster of the
two: the real limit of this machine. Files are hot in the page cache after
the first round, so this measures per-page overhead, not the disk.
Throughput runs are untraced (NullRecorder); one extra traced run per size
splits a prefetch into the submit call, the hit query, the IO and the
commit call by its trace events.

``--mode swa`` runs unified_radix with a sliding-window pool of the same
bytes per token as KV and a window of 2 of the 4 pages: the prefetch loads
KV, then the window's pages in one pool transfer, and commits both; the
baselines read the same KV files and the window's ``<hash>.swa`` files.

    python benchmarks/bench_prefetch.py [--mib 1,16,64] [--repeats 15] [--batch-pages 16] [--threads 1] [--mode kv|swa]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from caches.config import CacheConfig  # noqa: E402
from caches.core.hashing import page_hashes  # noqa: E402
from caches.core.cache_base import HierarchicalCache  # noqa: E402
from caches.hiradix import HiRadixCache  # noqa: E402
from caches.storage import pool_key  # noqa: E402
from caches.unified_radix import UnifiedRadixCache  # noqa: E402
from spec.clock import MonotonicClock  # noqa: E402
from spec.trace import EventKind, TraceRecorder  # noqa: E402

PAGE_SIZE = 64
PAGES = 4
TOKENS = PAGES * PAGE_SIZE
GOALS = ((16, 0.8), (0, 0.5))  # (from MiB, ratio against the faster baseline)
POLICY = "wait_complete"
WINDOW_PAGES = 2  # --mode swa: the sliding window, in pages before the match end
MODES = ("kv", "swa")


def goal_for(mib: float) -> float:
    return next(ratio for start, ratio in GOALS if mib >= start)


def prefetch_once(cache: HierarchicalCache, tokens: list[int], request_id: str) -> float:
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


def read_files(paths: list[str], views: list[memoryview]) -> None:
    for path, view in zip(paths, views):
        with open(path, "rb", buffering=0) as f:
            f.readinto(view)


def raw_readinto(paths: list[str], views: list[memoryview], helpers: ThreadPoolExecutor | None, threads: int) -> float:
    """Read every file whole; with helpers, in `threads` contiguous chunks (the caller reads the first)."""
    start = time.perf_counter()
    if helpers is None:
        read_files(paths, views)
    else:
        per = -(-len(paths) // threads)
        chunks = [(paths[i : i + per], views[i : i + per]) for i in range(0, len(paths), per)]
        futures = [helpers.submit(read_files, *chunk) for chunk in chunks[1:]]
        read_files(*chunks[0])
        for future in futures:
            future.result()
    return time.perf_counter() - start


def breakdown(cache: HierarchicalCache, tokens: list[int]) -> dict[str, float]:
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


def run_case(tmp: Path, mib: float, repeats: int, batch_pages: int, mode: str = "kv") -> dict[str, float]:
    token_kib = mib * 1024 / TOKENS
    elem = (2, int(token_kib * 256))  # float16: 4 bytes per element pair
    window = dict(extra_pools=("swa",), swa_elem_shape=elem, swa_window_tokens=WINDOW_PAGES * PAGE_SIZE,
                  swa_device_pages=PAGES + 1, swa_host_pages=PAGES + 1) if mode == "swa" else {}
    cls = UnifiedRadixCache if mode == "swa" else HiRadixCache

    def config(name: str) -> CacheConfig:
        return CacheConfig(
            page_size=PAGE_SIZE, device_pages=PAGES + 1, host_pages=PAGES + 1, kv_elem_shape=elem,
            dtype="float16", storage_path=str(tmp / f"{name}-{mib:g}"), storage_batch_pages=batch_pages,
            prefetch_policy=POLICY, prefetch_capacity_tokens=(PAGES + 1) * PAGE_SIZE, wait_timeout_s=60.0, **window,
        )

    with cls(config("plain")) as cache, cls(config("traced"), trace=TraceRecorder(MonotonicClock())) as traced:
        tokens = list(range(TOKENS))
        data = {pool: torch.randn(TOKENS, *elem).to(torch.float16) for pool in ("kv", *window.get("extra_pools", ()))}
        for c in (cache, traced):
            c.write(tokens, data)
            c.evict_all()  # flushes to storage first, then empties device and host
        timings = [prefetch_once(cache, tokens, f"r{rep}") for rep in range(repeats + 1)][1:]
        hashes = page_hashes(tokens, PAGE_SIZE)
        keys = [*hashes, *(pool_key(h, "swa") for h in hashes[-WINDOW_PAGES:] if mode == "swa")]
        paths = [str(cache.storage.path_for(k)) for k in keys]
        file_bytes = Path(paths[0]).stat().st_size
        buffer = bytearray(file_bytes * len(paths))
        views = [memoryview(buffer)[i * file_bytes : (i + 1) * file_bytes] for i in range(len(paths))]
        threads = cache.storage.read_threads
        with ThreadPoolExecutor(threads - 1) as helpers:
            raw = {
                1: [raw_readinto(paths, views, None, 1) for _ in range(repeats + 1)][1:],
                threads: [raw_readinto(paths, views, helpers, threads) for _ in range(repeats + 1)][1:],
            }
        parts = breakdown(traced, tokens)
        num_bytes = (TOKENS + (WINDOW_PAGES * PAGE_SIZE if mode == "swa" else 0)) * cache.device_pools["kv"].spec.bytes_per_slot
    best_raw = min(statistics.median(t) for t in raw.values())
    return {
        "mib": num_bytes / 2**20,
        "prefetch_ms": statistics.median(timings) * 1e3,
        "raw1_ms": statistics.median(raw[1]) * 1e3,
        "rawn_ms": statistics.median(raw[threads]) * 1e3,
        "threads": threads,
        "ratio": best_raw / statistics.median(timings),
        **parts,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", default="1,16,64", help="request sizes in MiB (4 pages each)")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--batch-pages", type=int, default=16, help="pages per IO batch (storage_batch_pages)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1: see benchmarks/README.md)")
    parser.add_argument("--mode", choices=MODES, default="kv", help="kv: hiradix, KV only; swa: unified_radix with a sliding window")
    args = parser.parse_args(argv)
    sizes = [float(s) for s in args.mib.split(",")]
    bad = [s for s in sizes if s <= 0 or (s * 1024 / TOKENS * 256) % 1]
    if bad:
        parser.error(f"--mib: {bad} do not give a whole number of float16 element pairs per token over {TOKENS} tokens")
    if args.threads < 1:
        parser.error(f"invalid --threads: {args.threads} (accepted: an integer >= 1)")
    torch.set_num_threads(args.threads)
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-prefetch-") as tmp:
        rows = [run_case(Path(tmp), mib, args.repeats, args.batch_pages, args.mode) for mib in sizes]
    what = "KV" if args.mode == "kv" else f"KV + a {WINDOW_PAGES}-page sliding window (MiB: both)"
    print(f"prefetch from files ({what}), policy {POLICY}, {PAGES} pages of {PAGE_SIZE} tokens, float16, batch {args.batch_pages} pages, "
          f"median of {args.repeats}; torch intra-op threads {torch.get_num_threads()}, {os.cpu_count()} cores, "
          f"load average {load:.2f} -> {os.getloadavg()[0]:.2f}")
    n = rows[0]["threads"]
    print(f"{'MiB':>6} {'prefetch ms':>12} {'readinto ms':>12} {f'x{n} threads ms':>15} {'ratio':>6} {'goal':>5} |"
          f" traced run, ms: {'submit':>7} {'hit':>7} {'io':>7} {'commit':>7}")
    failed = []
    for row in rows:
        goal = goal_for(row["mib"])
        if row["ratio"] < goal:
            failed.append(f"{row['mib']:g} MiB")
        print(f"{row['mib']:>6.1f} {row['prefetch_ms']:>12.3f} {row['raw1_ms']:>12.3f} {row['rawn_ms']:>15.3f} {row['ratio']:>6.2f} {goal:>5} |"
              f" {'':>15} {row['submit'] * 1e3:>7.2f} {row['hit_query'] * 1e3:>7.2f} {row['io'] * 1e3:>7.2f} {row['commit'] * 1e3:>7.2f}")
    print("ratio: the faster baseline's time over the prefetch's; " + ("every ratio meets its goal" if not failed else f"BELOW GOAL: {', '.join(failed)}"))
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
