"""Upstream's HiMambaRadixCache, built from the user's tree on CPU, behind the CacheUnderTest protocol.

Its sidecar is the mamba state pool: one recurrent state per prefix end, hit
policy TRAILING_PAGES, one host slot of its own, stored as '<hash>.mamba'
under the last page's hash; it runs on CPU at the harness's page sizes. Built
with upstream's own classes: a HybridReqToTokenPool with its MambaPool (two
mamba layers), a HybridLinearKVPool (two full-attention layers), the paged
allocator, then HiMambaRadixCache, which assembles its host pool group (KV and
MambaPoolHost), HybridCacheController and the HiCacheFile backend itself.
Pages larger than one token need the scheduler's mamba "extra buffer"
strategy (CacheInitParams.enable_mamba_extra_buffer), set as a user sets it.

A request's state enters the tree as upstream's scheduler caches one: a fresh
device mamba slot holding the state, inserted with the tokens; the slot is
freed when the tree already held a state there (mamba_exist).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

from conformance.adapter import PoolLayout
from conformance.live import collectives
from conformance.live.runtime import Runtime
from conformance.live.session import HEADS, LiveSession, configure_through
from conformance.live.taps import KV, tensor_digest
from spec.fence import HitPolicy
from spec.trace import EventKind

MAMBA = "mamba"
FULL_LAYERS, MAMBA_LAYERS = [1, 3], [0, 2]
# A small Mamba2 state: conv (12, 1) and temporal (2, 4, 2) per layer.
STATE_SHAPE = dict(intermediate_size=8, n_groups=1, num_heads=2, head_dim=4, state_size=2, conv_kernel=2)


def configure(runtime: Runtime, fields: Mapping[str, Any]) -> None:
    """C1/C2 through upstream's CLI parser and HiMambaRadixCache's extra-config parser."""
    configure_through(runtime, fields, runtime.module("hi_mamba_radix_cache").HiMambaRadixCache._parse_storage_backend_extra_config)


class HiMambaSession(LiveSession):
    """One upstream HiMambaRadixCache instance for one test."""

    CLASS_NAME = "HiMambaRadixCache"

    def build(self) -> Any:
        m, env, ps, pages = self.runtime.modules, self.env, self.env.page_size, self.device_pages
        # The mamba cache chunk size is derived from the model's config (which the server-args shim does not load).
        object.__setattr__(self.args, "_mamba_cache_chunk_size", ps)
        shape = m["mamba_utils"].Mamba2StateShape.create(tp_world_size=1, **STATE_SHAPE)
        cache_params = m["mamba_utils"].Mamba2CacheParams(shape=shape, layers=MAMBA_LAYERS)
        self.req_pool = m["memory_pool"].HybridReqToTokenPool(
            size=2, mamba_size=env.state_slots, mamba_spec_state_size=2, max_context_len=4096, device="cpu",
            enable_memory_saver=False, cache_params=cache_params, mamba_layer_ids=MAMBA_LAYERS, enable_mamba_extra_buffer=True)
        hybrid_pool = m["memory_pool"].HybridLinearKVPool(
            size=pages * ps, dtype=self.dtype, page_size=ps, head_num=HEADS, head_dim=self.head_dim, full_attention_layer_ids=FULL_LAYERS,
            enable_kvcache_transpose=False, device="cpu", mamba_pool=self.req_pool.mamba_pool)
        self.device_pool = hybrid_pool.full_kv_pool
        self.allocator = m["allocator"].PagedTokenToKVPoolAllocator(pages * ps, ps, self.dtype, "cpu", hybrid_pool, need_sort=False)
        params = m["cache_init_params"].CacheInitParams(
            disable=False, req_to_token_pool=self.req_pool, token_to_kv_pool_allocator=self.allocator,
            page_size=ps, tp_cache_group=self.group, enable_mamba_extra_buffer=True)
        cache = m["hi_mamba_radix_cache"].HiMambaRadixCache(params, self.args)
        self.kv_host = cache.full_kv_pool_host
        self.mamba_host = cache.mamba_pool_host
        self.state = self.req_pool.mamba_pool.mamba_cache
        return cache

    def observe(self) -> None:
        parts = [t[:, 0] for t in self._state_tensors(torch.zeros(1, dtype=torch.long))]
        nbytes = sum(p.numel() * p.element_size() for p in parts)
        self.pools[MAMBA] = PoolLayout(MAMBA, "state", (nbytes,), torch.uint8, HitPolicy.TRAILING_PAGES)
        self.taps.tap_host_pool(self.mamba_host, MAMBA)
        self.taps.tap_attach(self.cache.mamba_host_lru_list, MAMBA, "mamba_host_value")
        collectives.install(self.runtime.module("hi_mamba_radix_cache"))

    # --- the state: bytes <-> upstream's conv and temporal tensors of every mamba layer ------------------

    def _state_tensors(self, slot: torch.Tensor) -> list[torch.Tensor]:
        return [conv[:, slot] for conv in self.state.conv] + [self.state.temporal[:, slot]]

    def _write_state(self, slot: torch.Tensor, raw: torch.Tensor) -> None:
        offset = 0
        for target in [*self.state.conv, self.state.temporal]:
            part = target[:, slot]
            n = part.numel() * part.element_size()
            target[:, slot] = raw[offset : offset + n].view(part.dtype).reshape(part.shape)
            offset += n

    def _read_state(self, slot: torch.Tensor) -> torch.Tensor:
        return torch.cat([t.contiguous().view(-1).view(torch.uint8) for t in self._state_tensors(slot)]).reshape(1, -1)

    # --- the protocol ----------------------------------------------------------------------------------

    def write(self, tokens: Sequence[int], data: Mapping[str, torch.Tensor]) -> None:
        ps = self.env.page_size
        if len(tokens) % ps:
            raise AssertionError(f"sglang-live: HiMambaRadixCache caches a mamba state only at a page-aligned length; "
                                 f"a write of {len(tokens)} tokens (page size {ps}) has none it could cache")
        if not tokens:
            return
        slots = self._alloc_device(len(tokens))
        self._write_kv_rows(slots, data[KV])
        m = self.runtime.modules
        state_slot = self._alloc_state()
        self._write_state(state_slot, data[MAMBA].reshape(-1).view(torch.uint8))
        result = self.cache.insert(m["base_prefix_cache"].InsertParams(key=self.radix_key(tokens), value=slots, mamba_value=state_slot))
        if result.mamba_exist:
            self.req_pool.mamba_allocator.free(state_slot)  # the tree holds a state there already

    def _alloc_state(self) -> torch.Tensor:
        allocator = self.req_pool.mamba_allocator
        slot = allocator.alloc(1)
        if slot is None:
            self.cache.evict(self.runtime.modules["base_prefix_cache"].EvictParams(mamba_num=1))
            slot = allocator.alloc(1)
        if slot is None:
            raise AssertionError("sglang-live: no device mamba slot after evicting one")
        return slot

    def evict_params(self) -> Any:
        return self.runtime.modules["base_prefix_cache"].EvictParams(num_tokens=1 << 30, mamba_num=1 << 30)

    def evict_host_all(self) -> None:
        self.cache.evict_host(1 << 30)
        self.cache.evict_mamba_host(1 << 30)

    def needs_load(self, match: Any) -> bool:
        return bool(match.host_hit_length) or bool(getattr(match, "mamba_host_hit_length", 0))

    def record_extra_load_back(self, match: Any) -> None:
        node = match.best_match_node
        if node.mamba_host_value is None or node.mamba_value is not None or not node.hash_value:
            return
        slot = int(node.mamba_host_value[0])
        key = self.storage_file_name(f"{node.hash_value[-1]}.{MAMBA}")
        digest = tensor_digest(self.mamba_host.get_data_page(slot, flat=True))
        self.env.trace.record(EventKind.LOAD_BACK, pool=MAMBA, slots=[slot], keys=[key], digests=[digest])

    def loaded_extra(self, match: Any) -> dict[str, torch.Tensor]:
        node = match.last_device_node
        if not len(match.device_indices) or node.mamba_value is None:
            return {}
        return {MAMBA: self._read_state(node.mamba_value).clone()}

    def probe_operation(self, transfers_present: bool) -> tuple[type, list | None]:
        """Every operation of this cache is the hybrid controller's; a probe with transfers carries a mamba state's."""
        storage = self.runtime.modules["hicache_storage"]
        transfer = storage.PoolTransfer(name=storage.PoolName.MAMBA, keys=["probe"], hit_policy=storage.PoolHitPolicy.TRAILING_PAGES)
        return self.runtime.modules["hybrid_cache_controller"].PrefetchOperation, [transfer] if transfers_present else None

    def extra_accounting(self) -> dict[str, tuple[int, int, int]]:
        host_free, host_size = self.mamba_host.available_size(), self.mamba_host.size
        allocator = self.req_pool.mamba_allocator
        device_free, device_size = allocator.available_size(), allocator.size
        return {"host:mamba": (host_size - host_free, host_free, host_size),
                "device:mamba": (device_size - device_free, device_free, device_size)}
