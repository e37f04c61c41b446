"""The device-tier seam: upstream's device pools built on CPU, and a request's rows written into them and read back.

A session's KV rows go through one `Rows` object (its PoolLayout, write,
read): MHA here (k and v per layer), a DSA model's latent KV and indexer in
conformance/live/layouts/hiradix_dsa/tier.py. Slot accounting of any pool
with upstream's available_size()/size is `accounting`.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from conformance.adapter import CacheEnv, PoolLayout
from conformance.live.runtime import Runtime
from conformance.live.taps import KV
from spec.fence import HitPolicy

LAYERS, HEADS, HEAD_DIM = 2, 1, 4
DTYPE = torch.float32  # per token: k and v, per layer, HEADS x head size
# CacheEnv.kv_format -> (KV dtype, head size): the page format another server of the same model could store. No
# 'layout' (host_layouts is not declared): under the direct IO backend the harness drives on CPU, upstream allows
# layer_first and page_first_direct host layouts only, and HiCacheFile stores both pages in one byte order
# (memory_pool_host.get_data_page); the layouts that store another order need the kernel IO backend.
KV_FORMATS = {"default": (DTYPE, HEAD_DIM), "dtype": (torch.bfloat16, HEAD_DIM), "dtype_same_width": (torch.float16, HEAD_DIM)}


class Rows(Protocol):
    """One device pool's per-token rows, as the harness's request data holds them."""

    layout: PoolLayout

    def write(self, slots: torch.Tensor, rows: torch.Tensor) -> None: ...

    def read(self, slots: torch.Tensor) -> torch.Tensor: ...


@dataclass
class MhaRows:
    """k and v of every layer of an MHA device pool: a token's row is [2, LAYERS, HEADS, head size]."""

    device_pool: Any
    dtype: torch.dtype
    head_dim: int

    @property
    def layout(self) -> PoolLayout:
        return PoolLayout(KV, "token", (2, LAYERS, HEADS, self.head_dim), self.dtype, HitPolicy.ALL_PAGES)

    def write(self, slots: torch.Tensor, rows: torch.Tensor) -> None:
        for layer in range(LAYERS):
            self.device_pool.k_buffer[layer][slots] = rows[:, 0, layer].to(self.dtype)
            self.device_pool.v_buffer[layer][slots] = rows[:, 1, layer].to(self.dtype)

    def read(self, slots: torch.Tensor) -> torch.Tensor:
        pool = self.device_pool
        return torch.stack([torch.stack([pool.k_buffer[l][slots] for l in range(LAYERS)], 1),
                            torch.stack([pool.v_buffer[l][slots] for l in range(LAYERS)], 1)], 1)


def build(cls: Any, *args: Any, off: dict[str, Any] | None = None, **kwargs: Any) -> Any:
    """cls(*args, **kwargs), plus each of `off` (an option left at its off value) that this release's constructor has:
    a release that dropped an option the harness turns off builds as its own scheduler builds it."""
    accepted = inspect.signature(cls).parameters
    return cls(*args, **kwargs, **{name: value for name, value in (off or {}).items() if name in accepted})


def kv_format(env: CacheEnv) -> tuple[torch.dtype, int]:
    """(dtype, head size) of the environment's KV format."""
    return KV_FORMATS[env.kv_format]


def mha_device_tier(runtime: Runtime, env: CacheEnv, pages: int) -> tuple[Any, Any, Any, MhaRows]:
    """Upstream's MHA device KV pool (CPU), its paged allocator and a request pool: (device pool, allocator, request pool, rows)."""
    m, ps = runtime.modules, env.page_size
    dtype, head_dim = kv_format(env)
    device_pool = m["memory_pool"].MHATokenToKVPool(
        size=pages * ps, page_size=ps, dtype=dtype, head_num=HEADS, head_dim=head_dim,
        layer_num=LAYERS, device="cpu", enable_memory_saver=False)
    allocator = build(m["allocator"].PagedTokenToKVPoolAllocator, pages * ps, ps, dtype, "cpu", device_pool, off={"need_sort": False})
    req_pool = m["memory_pool"].ReqToTokenPool(size=2, max_context_len=4096, device="cpu", enable_memory_saver=False)
    return device_pool, allocator, req_pool, MhaRows(device_pool, dtype, head_dim)


def accounting(pool: Any) -> tuple[int, int, int]:
    """(allocated, free, capacity) of an upstream pool or allocator with available_size() and size."""
    free, size = pool.available_size(), pool.size
    return size - free, free, size
