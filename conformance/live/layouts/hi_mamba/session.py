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
from conformance.live.layouts.hi_mamba.sidecar import MAMBA, MambaSidecar
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


class HiMambaSession(LiveSession):
    """One upstream HiMambaRadixCache instance for one test."""

    CLASS_NAME = "HiMambaRadixCache"

    def mem_layout(self) -> str:
        return evidence.host_layout_of(self.runtime.tree, LAYOUT)[0] or super().mem_layout()

    def build(self) -> Any:
        m, env, ps, pages = self.runtime.modules, self.env, self.env.page_size, self.device_pages
        dtype, head_dim = kv_format(env)
        # The mamba cache chunk size is derived from the model's config (which the server-args shim does not load).
        object.__setattr__(self.args, "_mamba_cache_chunk_size", ps)
        shape = m["mamba_utils"].Mamba2StateShape.create(tp_world_size=1, **STATE_SHAPE)
        cache_params = m["mamba_utils"].Mamba2CacheParams(shape=shape, layers=MAMBA_LAYERS)
        self.req_pool = m["memory_pool"].HybridReqToTokenPool(
            size=2, mamba_size=env.state_slots, mamba_spec_state_size=2, max_context_len=4096, device="cpu",
            enable_memory_saver=False, cache_params=cache_params, mamba_layer_ids=MAMBA_LAYERS, enable_mamba_extra_buffer=True)
        hybrid_pool = build(
            m["memory_pool"].HybridLinearKVPool, size=pages * ps, dtype=dtype, page_size=ps, head_num=HEADS, head_dim=head_dim,
            full_attention_layer_ids=FULL_LAYERS, device="cpu", mamba_pool=self.req_pool.mamba_pool,
            off={"enable_kvcache_transpose": False})
        self.kv = MhaRows(hybrid_pool.full_kv_pool, dtype, head_dim)
        self.allocator = m["allocator"].PagedTokenToKVPoolAllocator(pages * ps, ps, dtype, "cpu", hybrid_pool, need_sort=False)
        params = m["cache_init_params"].CacheInitParams(
            disable=False, req_to_token_pool=self.req_pool, token_to_kv_pool_allocator=self.allocator,
            page_size=ps, tp_cache_group=self.group, enable_mamba_extra_buffer=True)
        cache = m["hi_mamba_radix_cache"].HiMambaRadixCache(params, self.args)
        self.kv_host = cache.full_kv_pool_host
        self.mamba = MambaSidecar(cache, self.req_pool, m, self.storage_file_name)  # read once the backend is attached
        self.sidecars = [self.mamba]
        return cache

    def tap(self) -> None:
        super().tap()
        collectives.install(self.runtime.module("hi_mamba_radix_cache"))  # it calls torch.distributed itself

    def write(self, tokens: Sequence[int], data: Mapping[str, torch.Tensor]) -> None:
        """KV rows and the state at the prefix end, inserted together (upstream caches a state only at a page-aligned length)."""
        ps = self.env.page_size
        if len(tokens) % ps:
            raise AssertionError(f"sglang-live: HiMambaRadixCache caches a mamba state only at a page-aligned length; "
                                 f"a write of {len(tokens)} tokens (page size {ps}) has none it could cache")
        if not tokens:
            return
        slots = self._alloc_device(len(tokens))
        self.kv.write(slots, data[KV])
        state_slot = self.mamba.alloc_state()
        self.mamba.states.write(state_slot, data[MAMBA].reshape(-1).view(torch.uint8))
        result = self.cache.insert(self.runtime.modules["base_prefix_cache"].InsertParams(
            key=self.radix_key(tokens), value=slots, mamba_value=state_slot))
        if result.mamba_exist:
            self.req_pool.mamba_allocator.free(state_slot)  # the tree holds a state there already
