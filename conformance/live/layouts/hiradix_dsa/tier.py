"""A DSA model's device tier on CPU: upstream's DSATokenToKVPool, its latent KV rows and its indexer rows.

The latent KV is MLA's, in the FP8 format a DSA model is served in (the
default on SM10, --kv-cache-dtype fp8_e4m3 elsewhere): one byte row per token
and layer of the quantised latent, a 4-byte scale per quantisation block and
the rope in its own storage dtype, sized as upstream's model runner sizes it
(kv_cache_dim, wider than kv_lora_rank + rope): a host tier must take its
rows from the pool, not from the model's dimensions. The indexer buffer holds, per layer and page, the fp8 index
keys of the page's tokens, then their fp32 scales (the layout upstream's
pool documents beside the buffer): a token's indexer row here is its key
bytes followed by its scale bytes, written into and read from that layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from conformance.adapter import CacheEnv, PoolLayout
from conformance.live.construct import LiveBuildError
from conformance.live.runtime import Runtime
from conformance.live.taps import KV
from conformance.live.tiers import LAYERS
from spec.fence import HitPolicy

INDEXER = "indexer"
KV_LORA_RANK, ROPE_DIM = 128, 8  # a small latent of one quantisation block: the cache reads neither, it moves the rows whole
INDEX_HEAD_DIM = 128  # DSATokenToKVPool asserts it
DTYPE = torch.float8_e4m3fn  # the pool stores it as bytes (its store_dtype)


@dataclass
class LatentRows:
    """MLA latent KV: a token's row is [LAYERS, kv_cache_dim], the same on every TP rank (upstream stores it once: backup_skip)."""

    device_pool: Any

    @property
    def layout(self) -> PoolLayout:
        return PoolLayout(KV, "token", (LAYERS, self.device_pool.kv_cache_dim), self.device_pool.store_dtype, HitPolicy.ALL_PAGES,
                          rank_replicated=True)

    def write(self, slots: torch.Tensor, rows: torch.Tensor) -> None:
        for layer in range(LAYERS):
            self.device_pool.kv_buffer[layer][slots] = rows[:, layer].to(self.device_pool.store_dtype).unsqueeze(1)

    def read(self, slots: torch.Tensor) -> torch.Tensor:
        return torch.stack([self.device_pool.kv_buffer[layer][slots, 0] for layer in range(LAYERS)], 1)


@dataclass
class IndexerRows:
    """The DSA indexer: a token's row is [LAYERS, key bytes + scale bytes] (uint8), in the page layout upstream's buffer has."""

    device_pool: Any

    @property
    def key_bytes(self) -> int:
        return int(self.device_pool.index_head_dim)

    @property
    def scale_bytes(self) -> int:
        pool = self.device_pool
        return int(pool.index_head_dim // pool.quant_block_size * 4)

    @property
    def layout(self) -> PoolLayout:
        return PoolLayout(INDEXER, "token", (LAYERS, self.key_bytes + self.scale_bytes), torch.uint8, HitPolicy.ALL_PAGES,
                          rank_replicated=True)

    def _offsets(self, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Flat offsets of each slot's key bytes and scale bytes within one layer's buffer."""
        ps = int(self.device_pool.page_size)
        slots = slots.long()
        page_base = (slots // ps) * ps * (self.key_bytes + self.scale_bytes)
        within = slots % ps
        keys = page_base[:, None] + within[:, None] * self.key_bytes + torch.arange(self.key_bytes)[None]
        scales = page_base[:, None] + ps * self.key_bytes + within[:, None] * self.scale_bytes + torch.arange(self.scale_bytes)[None]
        return keys, scales

    def write(self, slots: torch.Tensor, rows: torch.Tensor) -> None:
        keys, scales = self._offsets(slots)
        for layer in range(LAYERS):
            flat = self.device_pool.index_k_with_scale_buffer[layer].view(-1)
            flat[keys] = rows[:, layer, : self.key_bytes]
            flat[scales] = rows[:, layer, self.key_bytes :]

    def read(self, slots: torch.Tensor) -> torch.Tensor:
        keys, scales = self._offsets(slots)
        layers = []
        for layer in range(LAYERS):
            flat = self.device_pool.index_k_with_scale_buffer[layer].view(-1)
            layers.append(torch.cat([flat[keys], flat[scales]], 1))
        return torch.stack(layers, 1)


# The device pool's class as upstream spelled it after its rename of NSA to DSA (2026-05), and before.
POOL_CLASSES = ("DSATokenToKVPool", "NSATokenToKVPool")


def dsa_pool_class(memory_pool: Any) -> Any:
    """The DSA device pool class the tree's memory_pool module defines, under either of upstream's names."""
    found = [getattr(memory_pool, name) for name in POOL_CLASSES if isinstance(getattr(memory_pool, name, None), type)]
    if not found:
        raise LiveBuildError(f"{memory_pool.__name__} defines none of {', '.join(POOL_CLASSES)} (the DSA build's device pool)")
    return found[0]


def fp8_latent_width(pool_class: Any) -> int:
    """Bytes of a token's FP8 latent row as upstream's model runner sizes it (calculate_mla_kv_cache_dim), from the
    pool class's own quantisation block and rope storage dtype."""
    return KV_LORA_RANK + KV_LORA_RANK // pool_class.quant_block_size * 4 + ROPE_DIM * pool_class.rope_storage_dtype.itemsize


def dsa_device_tier(runtime: Runtime, env: CacheEnv, pages: int) -> tuple[Any, Any, Any]:
    """Upstream's DSATokenToKVPool (CPU; NSATokenToKVPool before the rename), its paged allocator and a request pool."""
    m, ps = runtime.modules, env.page_size
    pool_class = dsa_pool_class(m["memory_pool"])
    device_pool = pool_class(
        size=pages * ps, page_size=ps, kv_lora_rank=KV_LORA_RANK, dtype=DTYPE, qk_rope_head_dim=ROPE_DIM, layer_num=LAYERS,
        device="cpu", index_head_dim=INDEX_HEAD_DIM, enable_memory_saver=False, kv_cache_dim=fp8_latent_width(pool_class))
    allocator = m["allocator"].PagedTokenToKVPoolAllocator(pages * ps, ps, DTYPE, "cpu", device_pool, need_sort=False)
    req_pool = m["memory_pool"].ReqToTokenPool(size=2, max_context_len=4096, device="cpu", enable_memory_saver=False)
    return device_pool, allocator, req_pool
