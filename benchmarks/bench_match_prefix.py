"""Cost of RadixTree.match_prefix as the tree grows (1k, 10k, 100k nodes).

Run: python benchmarks/bench_match_prefix.py [--sizes 1000,10000,100000] [--seed 0]

Sequences imitate multi-turn traffic: a new conversation starts from one of a few
shared system prompts; most sequences extend a page-aligned prefix of an earlier one
(biased toward its end, so conversations deepen) with 1 to 8 fresh pages, capped at
MAX_PAGES pages. Queries are inserted sequences followed by a
partial page, so every query is a full hit that ends on a node boundary and the tree
does not change while it is timed.

The baseline ("raw") is the bare structure walk: a chain of dict lookups of the same
depth over the same page tuples, precomputed, with no slicing, comparison or tensor
work. Timings are the median over repetitions of perf_counter_ns around a loop over
all queries, with the garbage collector paused.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from caches.core.tree import RadixTree  # noqa: E402

PAGE_SIZE = 16
MAX_PAGES = 128
VOCAB = 50_000
NUM_SYSTEM_PROMPTS = 8
SYSTEM_PROMPT_PAGES = 32
NUM_QUERIES = 1_000
REPETITIONS = 7


def build_tree(num_nodes: int, rng: random.Random) -> tuple[RadixTree, list[tuple[int, ...]]]:
    tree = RadixTree(PAGE_SIZE)
    sequences: list[tuple[int, ...]] = []
    prompts = [
        tuple(rng.randrange(VOCAB) for _ in range(SYSTEM_PROMPT_PAGES * PAGE_SIZE))
        for _ in range(NUM_SYSTEM_PROMPTS)
    ]
    next_slot = 0
    while tree.node_count() < num_nodes:
        if sequences and rng.random() < 0.95:
            base = rng.choice(sequences)
            base_pages = len(base) // PAGE_SIZE
            low = base_pages // 2 if base_pages * 2 < MAX_PAGES else 0
            cut_pages = rng.randint(low, base_pages)
        else:
            base, cut_pages = rng.choice(prompts), SYSTEM_PROMPT_PAGES
        new_pages = rng.randint(1, 8)
        cut_pages = min(cut_pages, MAX_PAGES - new_pages)
        tail = tuple(rng.randrange(VOCAB) for _ in range(new_pages * PAGE_SIZE))
        tokens = base[: cut_pages * PAGE_SIZE] + tail
        slots = torch.arange(next_slot, next_slot + len(tokens), dtype=torch.int64)
        next_slot += len(tokens)
        tree.insert(tokens, slots)
        sequences.append(tokens)
    return tree, sequences


def path_keys(tree: RadixTree, tokens: tuple[int, ...]) -> list[tuple[int, ...]]:
    """The first-page key of every edge a full match of ``tokens`` walks."""
    keys = []
    node, pos = tree.root, 0
    while pos < len(tokens):
        key = tokens[pos : pos + PAGE_SIZE]
        node = node.children[key]
        keys.append(key)
        pos += len(node.key)
    return keys


def mirror(tree: RadixTree) -> dict:
    """Nested dicts with the tree's shape: the raw structure the walk goes through."""
    root: dict = {}
    stack = [(tree.root, root)]
    while stack:
        node, out = stack.pop()
        for first_page, child in node.children.items():
            out[first_page] = {}
            stack.append((child, out[first_page]))
    return root


def time_loop(body) -> float:
    """Median nanoseconds of one call to ``body`` (which runs all queries once)."""
    samples = []
    gc.disable()
    try:
        for _ in range(REPETITIONS):
            start = time.perf_counter_ns()
            body()
            samples.append(time.perf_counter_ns() - start)
    finally:
        gc.enable()
    return statistics.median(samples)


def measure(num_nodes: int, seed: int) -> dict:
    rng = random.Random(seed)
    started = time.perf_counter()
    tree, sequences = build_tree(num_nodes, rng)
    build_s = time.perf_counter() - started
    chosen = rng.sample(sequences, min(NUM_QUERIES, len(sequences)))
    queries = [list(seq) + [1] * (PAGE_SIZE // 2) for seq in chosen]
    key_chains = [path_keys(tree, seq) for seq in chosen]
    nested = mirror(tree)

    for query, seq in zip(queries, chosen):  # sanity: full hits, tree unchanged
        assert tree.match_prefix(query).matched_tokens == len(seq)
    nodes_before = tree.node_count()

    def run_match():
        match = tree.match_prefix
        for query in queries:
            match(query)

    def run_raw():
        for chain in key_chains:
            level = nested
            for key in chain:
                level = level[key]

    match_ns = time_loop(run_match) / len(queries)
    raw_ns = time_loop(run_raw) / len(queries)
    assert tree.node_count() == nodes_before
    return {
        "nodes": tree.node_count(),
        "build_s": build_s,
        "depth": statistics.mean(len(chain) for chain in key_chains),
        "tokens": statistics.mean(len(seq) for seq in chosen),
        "match_us": match_ns / 1000,
        "raw_us": raw_ns / 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]

    print(f"page_size={PAGE_SIZE}, {NUM_QUERIES} full-hit queries, median of {REPETITIONS}")
    header = (
        f"{'nodes':>8} {'build s':>8} {'depth':>6} {'tokens':>7} "
        f"{'match us':>9} {'raw us':>7} {'match/raw':>9}"
    )
    print(header)
    print("-" * len(header))
    rows = []
    for size in sizes:
        row = measure(size, args.seed)
        rows.append(row)
        print(
            f"{row['nodes']:>8} {row['build_s']:>8.2f} {row['depth']:>6.1f} "
            f"{row['tokens']:>7.0f} {row['match_us']:>9.2f} {row['raw_us']:>7.2f} "
            f"{row['match_us'] / row['raw_us']:>9.1f}"
        )
    if len(rows) > 1:
        first, last = rows[0], rows[-1]
        print(
            f"growth {last['nodes']}/{first['nodes']} nodes: match x"
            f"{last['match_us'] / first['match_us']:.2f}, raw x"
            f"{last['raw_us'] / first['raw_us']:.2f}, depth x"
            f"{last['depth'] / first['depth']:.2f}"
        )


if __name__ == "__main__":
    main()
