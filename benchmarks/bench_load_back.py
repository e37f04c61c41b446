"""Load-back throughput: HierarchicalCache.load_back vs one raw torch copy of the same bytes.

Each case is one request of 4 pages (page 64 tokens, so 256 tokens) whose KV
bytes per token make it the given size: 1 MiB is 4 KiB per token, 16 MiB is
64 KiB per token (what one of 8 tensor-parallel ranks holds for a 7B-class
model). The request is written and backed up to host; then, per repetition,
its device copy is evicted (not timed) and ``load_back`` plus the wait for
its copies is timed (the median over repetitions). The baseline is one
``Tensor.copy_`` of the same bytes between the same memory: the request's
host pool pages to the device pool pages load_back filled (pinned host ->
device on CUDA, host -> "device" on CPU), so both sides meet the same
caches, pages and placement, and the ratio measures our cost alone. Tracing
is off (NullRecorder), as in production. Both sides run with the same torch
intra-op threads (``--threads``, printed with the figures).

    python benchmarks/bench_load_back.py [--device cpu|cuda] [--mib 1,16,64] [--repeats 15] [--threads N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from caches.config import CacheConfig  # noqa: E402
from caches.hiradix import HiRadixCache  # noqa: E402

PAGE_SIZE = 64
PAGES = 4
TOKENS = PAGES * PAGE_SIZE
# Goal per size: small transfers pay a fixed cost per call, large ones must run near the raw copy.
GOALS = ((16, 0.85), (0, 0.5))  # (from MiB, ratio)


def goal_for(mib: float) -> float:
    return next(ratio for start, ratio in GOALS if mib >= start)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_load_back(cache: HiRadixCache, tokens: list[int], repeats: int) -> list[float]:
    timings = []
    for _ in range(repeats + 1):  # the first round warms up
        cache.evict(cache.tree.device_tokens())
        cache.copies.wait()
        node = cache.match_prefix(tokens).host_node
        synchronize(cache.device)
        start = time.perf_counter()
        slots = cache.load_back(node)
        cache.copies.wait()
        synchronize(cache.device)
        timings.append(time.perf_counter() - start)
        if slots is None or len(slots) != len(tokens):
            raise RuntimeError(f"load_back of {len(tokens)} tokens returned {None if slots is None else len(slots)} slots")
    return timings[1:]


def time_raw_copy(cache: HiRadixCache, tokens: list[int], repeats: int) -> list[float]:
    """One copy_ from the request's host pages to the device pages load_back used (one contiguous run each)."""
    m = cache.match_prefix(tokens)
    host, device = m.device_node.host_value, m.device_slots
    for slots in (host, device):
        if slots is None or not bool(((slots[1:] - slots[:-1]) == 1).all()):
            raise RuntimeError("the request's pages are not one contiguous run: no single raw copy to compare with")
    src = cache.host_pools["kv"].tensor[int(host[0]) : int(host[0]) + len(host)]
    dst = cache.device_pools["kv"].tensor[int(device[0]) : int(device[0]) + len(device)]
    expected = src.clone()
    timings = []
    for _ in range(repeats + 1):
        synchronize(cache.device)
        start = time.perf_counter()
        dst.copy_(src, non_blocking=True)
        synchronize(cache.device)
        timings.append(time.perf_counter() - start)
    if not torch.equal(dst.cpu(), expected):
        raise RuntimeError("raw copy produced different bytes")
    return timings[1:]


def run_case(device: torch.device, mib: float, repeats: int) -> dict[str, float]:
    token_kib = mib * 1024 / TOKENS
    elem = (2, int(token_kib * 256))  # float16: 4 bytes per element pair
    config = CacheConfig(
        page_size=PAGE_SIZE, device=str(device), device_pages=PAGES + 1, host_pages=PAGES + 1,
        kv_elem_shape=elem, dtype="float16", storage_backend="memory", write_policy="write_through",
        wait_timeout_s=60.0,
    )
    with HiRadixCache(config) as cache:  # trace defaults to NullRecorder
        tokens = list(range(TOKENS))
        data = {"kv": torch.randn(TOKENS, *elem).to(torch.float16)}
        cache.write(tokens, data)
        cache.flush()  # the host copy exists: load_back has something to load
        loaded = time_load_back(cache, tokens, repeats)
        m = cache.match_prefix(tokens)
        if not torch.equal(cache.read_device(m.device_slots)["kv"], data["kv"]):
            raise RuntimeError(f"loaded-back bytes differ for {mib} MiB")
        num_bytes = TOKENS * cache.device_pools["kv"].spec.bytes_per_slot
        raw = time_raw_copy(cache, tokens, repeats)
    return {
        "mib": num_bytes / 2**20,
        "load_back_ms": statistics.median(loaded) * 1e3,
        "raw_ms": statistics.median(raw) * 1e3,
        "load_back": num_bytes / statistics.median(loaded),
        "raw": num_bytes / statistics.median(raw),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--mib", default="1,16,64", help="request sizes in MiB (4 pages each)")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads for both sides (default: torch's)")
    args = parser.parse_args(argv)
    sizes = [float(s) for s in args.mib.split(",")]
    bad = [s for s in sizes if s <= 0 or (s * 1024 / TOKENS * 256) % 1]
    if bad:
        parser.error(f"--mib: {bad} do not give a whole number of float16 element pairs per token over {TOKENS} tokens")
    if args.threads is not None:
        if args.threads < 1:
            parser.error(f"invalid --threads: {args.threads} (accepted: an integer >= 1)")
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    load = os.getloadavg()[0]
    rows = [run_case(device, mib, args.repeats) for mib in sizes]
    print(f"load_back on {device}, {PAGES} pages of {PAGE_SIZE} tokens, float16, median of {args.repeats}; "
          f"torch intra-op threads {torch.get_num_threads()}, {os.cpu_count()} cores, load average {load:.2f} -> {os.getloadavg()[0]:.2f}")
    print(f"{'MiB':>6} {'load_back ms':>13} {'raw copy ms':>12} {'load_back GiB/s':>16} {'raw GiB/s':>10} {'ratio':>6} {'goal':>5}")
    failed = []
    for row in rows:
        ratio = row["load_back"] / row["raw"]
        goal = goal_for(row["mib"])
        if ratio < goal:
            failed.append(f"{row['mib']:g} MiB")
        print(f"{row['mib']:>6.1f} {row['load_back_ms']:>13.3f} {row['raw_ms']:>12.3f} {row['load_back'] / 2**30:>16.2f} "
              f"{row['raw'] / 2**30:>10.2f} {ratio:>6.2f} {goal:>5}")
    print("every ratio meets its goal" if not failed else f"BELOW GOAL: {', '.join(failed)}")
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
