"""Upstream's HiMambaRadixCache, built from the user's tree on CPU: KV and its mamba state pool (sidecar.py).

Built with upstream's own classes: a HybridReqToTokenPool with its MambaPool
(two mamba layers), a HybridLinearKVPool (two full-attention layers), the
paged allocator, then HiMambaRadixCache, which assembles its host pool group
(KV and MambaPoolHost), HybridCacheController and the HiCacheFile backend
itself. Pages larger than one token need the scheduler's mamba "extra
buffer" strategy (CacheInitParams.enable_mamba_extra_buffer), set as a user
sets it.

A request's state enters the tree as upstream's scheduler caches one: a fresh
device mamba slot holding the state, inserted with the tokens; the slot is
freed when the tree already held a state there (mamba_exist).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

from conformance.live import collectives, evidence
from conformance.live.layouts.hi_mamba import LAYOUT
from conformance.live.configuration import configure_through
from conformance.live.layouts.hi_mamba.sidecar import MAMBA, MambaSidecar, state_allocator
from conformance.live.runtime import Runtime
from conformance.live.session import LiveSession
from conformance.live.taps import KV
from conformance.live.tiers import HEADS, MhaRows, build, kv_format

FULL_LAYERS, MAMBA_LAYERS = [1, 3], [0, 2]
# A small Mamba2 state: conv (12, 1) and temporal (2, 4, 2) per layer.
STATE_SHAPE = dict(intermediate_size=8, n_groups=1, num_heads=2, head_dim=4, state_size=2, conv_kernel=2)


def configure(runtime: Runtime, fields: Mapping[str, Any]) -> None:
    """C1/C2 through upstream's CLI parser and HiMambaRadixCache's extra-config parser."""
    configure_through(runtime, fields, runtime.module("hi_mamba_radix_cache").HiMambaRadixCache._parse_storage_backend_extra_config)


def mamba_device_tier(session: LiveSession) -> Any:
    """Upstream's device tier of a hybrid mamba model: a HybridReqToTokenPool with its MambaPool, a HybridLinearKVPool
    and the paged allocator on it. Sets session.kv and session.allocator; returns the request pool."""
    m, env, ps, pages = session.runtime.modules, session.env, session.env.page_size, session.device_pages
    dtype, head_dim = kv_format(env)
    # The mamba cache chunk size is derived from the model's config, which a no-model server never loads: pre-seeded, as
    # upstream's own fixtures seed it (0.5.2x's ServerArgs admits it as bookkeeping; the fork's shim is frozen).
    try:
        setattr(session.args, "_mamba_cache_chunk_size", ps)
    except (AttributeError, TypeError):
        object.__setattr__(session.args, "_mamba_cache_chunk_size", ps)
    shape = m["mamba_utils"].Mamba2StateShape.create(tp_world_size=1, **STATE_SHAPE)
    cache_params = m["mamba_utils"].Mamba2CacheParams(shape=shape, layers=MAMBA_LAYERS)
    req_pool = m["memory_pool"].HybridReqToTokenPool(
        size=2, mamba_size=env.state_slots, mamba_spec_state_size=2, max_context_len=4096, device="cpu",
        enable_memory_saver=False, cache_params=cache_params, mamba_layer_ids=MAMBA_LAYERS, enable_mamba_extra_buffer=True)
    hybrid_pool = build(
        m["memory_pool"].HybridLinearKVPool, size=pages * ps, dtype=dtype, page_size=ps, head_num=HEADS, head_dim=head_dim,
        full_attention_layer_ids=FULL_LAYERS, device="cpu", mamba_pool=req_pool.mamba_pool,
        off={"enable_kvcache_transpose": False})
    session.kv = MhaRows(hybrid_pool.full_kv_pool, dtype, head_dim)
    session.allocator = m["allocator"].PagedTokenToKVPoolAllocator(pages * ps, ps, dtype, "cpu", hybrid_pool, need_sort=False)
    return req_pool


class HiMambaSession(LiveSession):
    """One upstream HiMambaRadixCache instance for one test."""

    CLASS_NAME = "HiMambaRadixCache"

    def mem_layout(self) -> str:
        return evidence.host_layout_of(self.runtime.tree, LAYOUT)[0] or super().mem_layout()

    def build(self) -> Any:
        m = self.runtime.modules
        self.req_pool = mamba_device_tier(self)
        params = m["cache_init_params"].CacheInitParams(
            disable=False, req_to_token_pool=self.req_pool, token_to_kv_pool_allocator=self.allocator,
            page_size=self.env.page_size, tp_cache_group=self.group, enable_mamba_extra_buffer=True)
        cache = m["hi_mamba_radix_cache"].HiMambaRadixCache(params, self.args)
        self.kv_host = cache.full_kv_pool_host
        self.mamba = MambaSidecar(cache, self.req_pool, m, self.storage_file_name)  # read once the backend is attached
        self.sidecars = [self.mamba]
        return cache

    def tap(self) -> None:
        super().tap()
        collectives.install(self.runtime.module("hi_mamba_radix_cache"))  # it calls torch.distributed itself

    def write(self, tokens: Sequence[int], data: Mapping[str, torch.Tensor]) -> None:
        write_with_state(self, tokens, data)


def write_with_state(session: LiveSession, tokens: Sequence[int], data: Mapping[str, torch.Tensor]) -> None:
    """KV rows and the state at the prefix end, inserted together, as the scheduler caches a request (upstream caches a
    state only at a page-aligned length): a prefix the tree held already is freed, and so is a state where it had one."""
    ps = session.env.page_size
    if len(tokens) % ps:
        raise AssertionError(f"sglang-live: {session.CLASS_NAME} caches a mamba state only at a page-aligned length; "
                             f"a write of {len(tokens)} tokens (page size {ps}) has none it could cache")
    if not tokens:
        return
    slots = session._alloc_device(len(tokens))
    session.kv.write(slots, data[KV])
    state_slot = session.mamba.alloc_state()
    session.mamba.states.write(state_slot, data[MAMBA].reshape(-1).view(torch.uint8))
    result = session.cache.insert(session.runtime.modules["base_prefix_cache"].InsertParams(
        key=session.radix_key(tokens), value=slots, mamba_value=state_slot))
    if result.prefix_len:
        session.allocator.free(slots[: result.prefix_len])
    if result.mamba_exist:
        state_allocator(session.req_pool).free(state_slot)
