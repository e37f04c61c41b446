"""A hybrid sliding-window model's device tier: upstream's SWAKVPool (two full-attention and two sliding-window MHA
layers) and its SWATokenToKVPoolAllocator, which maps every full-attention slot to a window slot."""

from __future__ import annotations

from typing import Any

from conformance.live.session import LiveSession
from conformance.live.tiers import HEADS, MhaRows, build, kv_format

FULL_LAYERS, SWA_LAYERS = [1, 3], [0, 2]


def swa_device_tier(session: LiveSession) -> tuple[Any, MhaRows]:
    """Sets session.kv (the full-attention rows) and session.allocator; returns (the request pool, the window rows).

    The window pool has as many slots as the full pool: every token a test writes keeps its window rows until the
    tree evicts them (a smaller window pool is a capacity choice of the deployment, not the protocol)."""
    m, env, ps, pages = session.runtime.modules, session.env, session.env.page_size, session.device_pages
    dtype, head_dim = kv_format(env)
    pool = build(m["swa_memory_pool"].SWAKVPool, size=pages * ps, size_swa=pages * ps, page_size=ps, dtype=dtype, head_num=HEADS,
                 head_dim=head_dim, swa_attention_layer_ids=SWA_LAYERS, full_attention_layer_ids=FULL_LAYERS, device="cpu",
                 off={"enable_kvcache_transpose": False})
    session.allocator = m["swa_allocator"].SWATokenToKVPoolAllocator(pages * ps, pages * ps, ps, dtype, "cpu", pool, need_sort=False)
    session.kv = MhaRows(pool.full_kv_pool, dtype, head_dim)
    req_pool = m["memory_pool"].ReqToTokenPool(size=2, max_context_len=4096, device="cpu", enable_memory_saver=False)
    return req_pool, MhaRows(pool.swa_kv_pool, dtype, head_dim)
