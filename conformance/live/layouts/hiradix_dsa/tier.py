"""A DSA model's device tier on CPU: upstream's DSATokenToKVPool, its latent KV rows and its indexer rows.

The latent KV is MLA's: one row of kv_lora_rank + rope dims per token and
layer (bf16). The indexer buffer holds, per layer and page, the fp8 index
keys of the page's tokens, then their fp32 scales (the layout upstream's
pool documents beside the buffer): a token's indexer row here is its key
bytes followed by its scale bytes, written into and read from that layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from conformance.adapter import CacheEnv, PoolLayout
from conformance.live.runtime import Runtime
from conformance.live.taps import KV
from conformance.live.tiers import LAYERS
from spec.fence import HitPolicy

INDEXER = "indexer"
KV_LORA_RANK, ROPE_DIM = 16, 8  # a small latent: the cache reads neither, it moves the rows whole
INDEX_HEAD_DIM = 128  # DSATokenToKVPool asserts it
DTYPE = torch.bfloat16


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


def dsa_device_tier(runtime: Runtime, env: CacheEnv, pages: int) -> tuple[Any, Any, Any]:
    """Upstream's DSATokenToKVPool (CPU), its paged allocator and a request pool."""
    m, ps = runtime.modules, env.page_size
    device_pool = m["memory_pool"].DSATokenToKVPool(
        size=pages * ps, page_size=ps, kv_lora_rank=KV_LORA_RANK, dtype=DTYPE, qk_rope_head_dim=ROPE_DIM, layer_num=LAYERS,
        device="cpu", index_head_dim=INDEX_HEAD_DIM, enable_memory_saver=False, kv_cache_dim=KV_LORA_RANK + ROPE_DIM)
    allocator = m["allocator"].PagedTokenToKVPoolAllocator(pages * ps, ps, DTYPE, "cpu", device_pool, need_sort=False)
    req_pool = m["memory_pool"].ReqToTokenPool(size=2, max_context_len=4096, device="cpu", enable_memory_saver=False)
    return device_pool, allocator, req_pool
