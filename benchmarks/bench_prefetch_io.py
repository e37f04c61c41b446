"""Prefetch read throughput: FileStorage.get into a host pool vs raw open+readinto.

Writes N pages into a FileStorage in a temporary directory, then times, in the
same run and interleaved, (a) ``FileStorage.get`` of every page into a
preallocated host PoolBuffer and (b) a bare loop of ``open`` + ``readinto`` of
the same files into a preallocated buffer. Prints bytes/s of both and their
ratio (goal: >= 0.7). Files are hot in the page cache after writing, so this
measures the backend's per-page overhead, not the disk.

    python benchmarks/bench_prefetch_io.py [--pages 512] [--repeats 7]
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from caches.core.pools import PoolBuffer, PoolSpec, tensor_bytes_view  # noqa: E402
from caches.storage import FileStorage  # noqa: E402

PAGE_SIZE = 64  # tokens per page
GOAL_RATIO = 0.7


def run_case(page_bytes: int, num_pages: int, repeats: int) -> dict[str, float]:
    # bfloat16 KV of 2 x 8 heads; head_dim chosen so one page is page_bytes.
    head_dim = page_bytes // (PAGE_SIZE * 2 * 8 * 2)
    spec = PoolSpec.kv((2, 8, head_dim), torch.bfloat16)
    assert spec.bytes_per_page(PAGE_SIZE) == page_bytes
    keys = [hashlib.sha256(f"page-{i}".encode()).hexdigest() for i in range(num_pages)]
    with tempfile.TemporaryDirectory(prefix="bench-prefetch-io-") as tmp:
        store = FileStorage(Path(tmp) / "store")
        source = PoolBuffer.host(spec, num_pages * PAGE_SIZE, for_device="cpu")
        source.tensor.copy_(torch.randn(source.tensor.shape).to(torch.bfloat16))
        sources = [source.page_view(p * PAGE_SIZE, PAGE_SIZE) for p in range(num_pages)]
        assert store.set(keys, sources) == [True] * num_pages

        host = PoolBuffer.host(spec, num_pages * PAGE_SIZE, for_device="cpu")
        targets = [host.page_view(p * PAGE_SIZE, PAGE_SIZE) for p in range(num_pages)]
        paths = [str(store.path_for(key)) for key in keys]
        raw = bytearray(num_pages * (page_bytes + 64))
        raw_views = [memoryview(raw)[p * (page_bytes + 64):(p + 1) * (page_bytes + 64)]
                     for p in range(num_pages)]

        def backend_get() -> None:
            if not all(store.get(keys, targets)):
                raise RuntimeError("FileStorage.get missed a page it had just stored")

        def raw_readinto() -> None:
            # The same files, whole (header included), with no checks at all.
            for path, view in zip(paths, raw_views):
                with open(path, "rb", buffering=0) as f:
                    f.readinto(view)

        timings: dict[str, list[float]] = {"backend": [], "raw": []}
        backend_get(), raw_readinto()  # warm up both paths once
        for _ in range(repeats):
            for name, fn in (("backend", backend_get), ("raw", raw_readinto)):
                start = time.perf_counter()
                fn()
                timings[name].append(time.perf_counter() - start)
        if bytes(tensor_bytes_view(host.tensor)) != bytes(tensor_bytes_view(source.tensor)):
            raise RuntimeError("pages read back differ from the pages written")
        store.close()
    total = num_pages * page_bytes
    backend_rate = total / statistics.median(timings["backend"])
    raw_rate = total / statistics.median(timings["raw"])
    return {"backend": backend_rate, "raw": raw_rate, "ratio": backend_rate / raw_rate}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=512, help="pages of 64 KiB")
    parser.add_argument("--large-pages", type=int, default=128, help="pages of 1 MiB")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    below_goal = False
    for page_bytes, num_pages in ((64 * 1024, args.pages), (1024 * 1024, args.large_pages)):
        result = run_case(page_bytes, num_pages, args.repeats)
        below_goal |= result["ratio"] < GOAL_RATIO
        print(
            f"{num_pages} pages x {page_bytes // 1024} KiB: "
            f"FileStorage.get {result['backend'] / 2**30:.2f} GiB/s, "
            f"raw open+readinto {result['raw'] / 2**30:.2f} GiB/s, "
            f"ratio {result['ratio']:.2f} (goal >= {GOAL_RATIO})"
        )
    return 1 if below_goal else 0


if __name__ == "__main__":
    sys.exit(main())
