"""Load-back throughput: HierarchicalCache.load_back vs a raw torch copy of the same bytes.

For each prefix size, one request is written and backed up to host, then, per
repetition, its device copy is evicted and the time of ``load_back`` plus the
wait for its copies is taken (steady state: the median over repetitions). The
baseline copies the same number of bytes between the same devices with one
``Tensor.copy_``: pinned host -> device on CUDA, host -> "device" (CPU
tensors) on CPU. Tracing is off (NullRecorder), as in production.

    python benchmarks/bench_load_back.py [--device cpu|cuda] [--sizes 256,1024,4096,8192] [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from caches.config import CacheConfig  # noqa: E402
from caches.hiradix import HiRadixCache  # noqa: E402

PAGE_SIZE = 64
# Default KV per token: 64 KiB, what one of 8 tensor-parallel ranks holds for a
# 7B-class model (2 x 32 layers x 4096 x 2 bytes / 8). Small tokens measure
# per-call overhead instead: try --token-kib 4.
DEFAULT_TOKEN_KIB = 64
KV_ELEM = (2, DEFAULT_TOKEN_KIB * 256)  # float16: 4 bytes per element pair
GOAL_RATIO = 0.8


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


def time_raw_copy(num_bytes: int, device: torch.device, repeats: int) -> list[float]:
    src = torch.empty(num_bytes, dtype=torch.uint8, pin_memory=device.type == "cuda")
    src.random_(0, 256)
    dst = torch.empty(num_bytes, dtype=torch.uint8, device=device)
    timings = []
    for _ in range(repeats + 1):
        synchronize(device)
        start = time.perf_counter()
        dst.copy_(src, non_blocking=True)
        synchronize(device)
        timings.append(time.perf_counter() - start)
    if not torch.equal(dst.cpu(), src):
        raise RuntimeError("raw copy produced different bytes")
    return timings[1:]


def run(device: torch.device, sizes: list[int], repeats: int) -> list[dict[str, float]]:
    max_pages = max(sizes) // PAGE_SIZE + 1
    rows = []
    config = CacheConfig(
        page_size=PAGE_SIZE, device=str(device), device_pages=max_pages, host_pages=max_pages,
        kv_elem_shape=KV_ELEM, dtype="float16", storage_backend="memory", write_policy="write_through",
        wait_timeout_s=60.0,
    )
    with HiRadixCache(config) as cache:  # trace defaults to NullRecorder
        bytes_per_token = cache.device_pools["kv"].spec.bytes_per_slot
        for index, size in enumerate(sizes):
            tokens = [index * 1_000_000 + i for i in range(size)]
            data = {"kv": torch.randn(size, *KV_ELEM).to(torch.float16)}
            cache.write(tokens, data)
            cache.flush()  # the host copy exists: load_back has something to load
            loaded = time_load_back(cache, tokens, repeats)
            m = cache.match_prefix(tokens)
            if not torch.equal(cache.read_device(m.device_slots)["kv"], data["kv"]):
                raise RuntimeError(f"loaded-back bytes differ for {size} tokens")
            raw = time_raw_copy(size * bytes_per_token, device, repeats)
            cache.evict(cache.tree.device_tokens())
            cache.evict_host(cache.tree.host_tokens())
            cache.copies.wait()
            num_bytes = size * bytes_per_token
            rows.append({
                "tokens": size,
                "mib": num_bytes / 2**20,
                "load_back": num_bytes / statistics.median(loaded),
                "raw": num_bytes / statistics.median(raw),
            })
    for row in rows:
        row["ratio"] = row["load_back"] / row["raw"]
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--sizes", default="256,1024,4096", help="prefix sizes in tokens (multiples of 64)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--token-kib", type=int, default=DEFAULT_TOKEN_KIB, help="KV bytes per token, in KiB")
    args = parser.parse_args(argv)
    if args.token_kib <= 0:
        parser.error(f"invalid --token-kib: {args.token_kib} (accepted: an integer > 0)")
    global KV_ELEM
    KV_ELEM = (2, args.token_kib * 256)
    sizes = [int(s) for s in args.sizes.split(",")]
    bad = [s for s in sizes if s <= 0 or s % PAGE_SIZE]
    if bad:
        parser.error(f"--sizes: {bad} are not positive multiples of the page size {PAGE_SIZE}")
    device = torch.device(args.device)
    rows = run(device, sizes, args.repeats)
    print(f"load_back on {device} (kv {KV_ELEM} float16, page {PAGE_SIZE} tokens, median of {args.repeats})")
    print(f"{'tokens':>7} {'MiB':>7} {'load_back GiB/s':>16} {'raw copy GiB/s':>15} {'ratio':>6}")
    for row in rows:
        print(f"{row['tokens']:>7} {row['mib']:>7.1f} {row['load_back'] / 2**30:>16.2f} {row['raw'] / 2**30:>15.2f} {row['ratio']:>6.2f}")
    worst = min(row["ratio"] for row in rows)
    print(f"worst ratio {worst:.2f} (goal >= {GOAL_RATIO}){'' if worst >= GOAL_RATIO else ': BELOW GOAL'}")
    return 0 if worst >= GOAL_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
