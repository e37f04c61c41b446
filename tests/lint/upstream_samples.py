"""The upstream-shaped samples the linter tests read, and the paths of SGLang's layout they are placed at."""

from __future__ import annotations

from pathlib import Path

SAMPLES = Path(__file__).resolve().parent / "samples"
# HiRadixCache with extra pools read after KV and no guard (the race), and the same with PR #27550's guard.
PREFIX = (SAMPLES / "upstream" / "hiradix_prefix.py.txt").read_text()
FIXED = (SAMPLES / "upstream" / "hiradix_fixed.py.txt").read_text()
KV_ONLY = PREFIX.split("\n    def _get_extra_pools")[0] + "\n"  # before any extra pool: nothing owed
CACHE = Path("python", "sglang", "srt", "mem_cache", "hiradix_cache.py")
CONTROLLER = Path("python", "sglang", "srt", "managers", "cache_controller.py")
