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

``--mode swa`` runs unified_radix with a sliding-window pool of the same
bytes per token as KV and a window of 2 of the 4 pages (Gemma- and
GPT-OSS-style interleaved layers): load_back brings KV and the window's
pages, and the baseline copies the same KV pages and window pages, one
``copy_`` each.

    python benchmarks/bench_load_back.py [--device cpu|cuda] [--mib 1,16,64] [--repeats 15] [--threads N] [--mode kv|swa]
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
from caches.core.cache_base import HierarchicalCache  # noqa: E402
from caches.hiradix import HiRadixCache  # noqa: E402
from caches.unified_radix import UnifiedRadixCache  # noqa: E402

PAGE_SIZE = 64
PAGES = 4
TOKENS = PAGES * PAGE_SIZE
WINDOW_PAGES = 2  # --mode swa: the sliding window, in pages before the match end
MODES = ("kv", "swa")
# Goal per size: small transfers pay a fixed cost per call, large ones must run near the raw copy.
GOALS = ((16, 0.85), (0, 0.5))  # (from MiB, ratio)


def goal_for(mib: float) -> float:
    return next(ratio for start, ratio in GOALS if mib >= start)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_load_back(cache: HierarchicalCache, tokens: list[int], repeats: int) -> list[float]:
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


def contiguous(slots: torch.Tensor | None) -> torch.Tensor:
    if slots is None or not bool(((slots[1:] - slots[:-1]) == 1).all()):
        raise RuntimeError("the request's pages are not one contiguous run: no single raw copy to compare with")
    return slots


def raw_pairs(cache: HierarchicalCache, tokens: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(host rows, device rows) that load_back filled: KV, and in swa mode the window's pages."""
    m = cache.match_prefix(tokens)
    host = contiguous(torch.cat([n.host_value for n in cache.tree.path_to(m.device_node)]))
    device = contiguous(m.device_slots)
    pairs = [(cache.host_pools["kv"].tensor[int(host[0]) : int(host[0]) + len(host)],
              cache.device_pools["kv"].tensor[int(device[0]) : int(device[0]) + len(device)])]
    if isinstance(cache, UnifiedRadixCache) and "swa" in cache.components:
        window = cache.components["swa"]
        nodes = window.window_nodes(m.device_node)
        host_w = contiguous(torch.cat([window.slots(n, "host") for n in nodes]))
        device_w = contiguous(torch.cat([window.slots(n, "device") for n in nodes]))
        pairs.append((cache.host_pools["swa"].tensor[int(host_w[0]) : int(host_w[0]) + len(host_w)],
                      cache.device_pools["swa"].tensor[int(device_w[0]) : int(device_w[0]) + len(device_w)]))
    return pairs


def time_raw_copy(cache: HierarchicalCache, tokens: list[int], repeats: int) -> list[float]:
    """One copy_ per pool from the request's host pages to the device pages load_back used (one contiguous run each)."""
    pairs = raw_pairs(cache, tokens)
    expected = [src.clone() for src, _ in pairs]
    timings = []
    for _ in range(repeats + 1):
        synchronize(cache.device)
        start = time.perf_counter()
        for src, dst in pairs:
            dst.copy_(src, non_blocking=True)
        synchronize(cache.device)
        timings.append(time.perf_counter() - start)
    if not all(torch.equal(dst.cpu(), want) for (_, dst), want in zip(pairs, expected)):
        raise RuntimeError("raw copy produced different bytes")
    return timings[1:]


def run_case(device: torch.device, mib: float, repeats: int, mode: str = "kv") -> dict[str, float]:
    token_kib = mib * 1024 / TOKENS
    elem = (2, int(token_kib * 256))  # float16: 4 bytes per element pair
    fields = dict(
        page_size=PAGE_SIZE, device=str(device), device_pages=PAGES + 1, host_pages=PAGES + 1,
        kv_elem_shape=elem, dtype="float16", storage_backend="memory", write_policy="write_through",
        wait_timeout_s=60.0,
    )
    if mode == "swa":
        fields.update(extra_pools=("swa",), swa_elem_shape=elem, swa_window_tokens=WINDOW_PAGES * PAGE_SIZE,
                      swa_device_pages=PAGES + 1, swa_host_pages=PAGES + 1)
    cls = UnifiedRadixCache if mode == "swa" else HiRadixCache
    with cls(CacheConfig(**fields)) as cache:  # trace defaults to NullRecorder
        tokens = list(range(TOKENS))
        data = {pool: torch.randn(TOKENS, *elem).to(torch.float16) for pool in ("kv", *fields.get("extra_pools", ()))}
        cache.write(tokens, data)
        cache.flush()  # the host copy exists: load_back has something to load
        loaded = time_load_back(cache, tokens, repeats)
        m = cache.match_prefix(tokens)
        got = cache.read_device(m.device_slots, state_node=m.device_node)
        window = TOKENS - WINDOW_PAGES * PAGE_SIZE
        if not torch.equal(got["kv"], data["kv"]) or (mode == "swa" and not torch.equal(got["swa"], data["swa"][window:])):
            raise RuntimeError(f"loaded-back bytes differ for {mib} MiB")
        num_bytes = sum(src.numel() * src.element_size() for src, _ in raw_pairs(cache, tokens))
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
    parser.add_argument("--mode", choices=MODES, default="kv", help="kv: hiradix, KV only; swa: unified_radix with a sliding window")
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
    rows = [run_case(device, mib, args.repeats, args.mode) for mib in sizes]
    what = "KV" if args.mode == "kv" else f"KV + a {WINDOW_PAGES}-page sliding window (MiB: both)"
    print(f"load_back on {device} ({what}), {PAGES} pages of {PAGE_SIZE} tokens, float16, median of {args.repeats}; "
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
