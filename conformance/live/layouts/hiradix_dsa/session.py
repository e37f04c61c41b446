"""Upstream's HiRadixCache on a DSA model's KV, built from the user's tree on CPU through upstream's own assembler.

The device pool is a DSATokenToKVPool (latent KV and the indexer, bf16, two
layers); HiRadixCache sees it and calls attach_hybrid_dsa_pool_to_hiradix_cache,
which builds the host pool group (MLATokenToKVPoolHost and DSAIndexerPoolHost),
the HybridCacheController and the INDEXER transfer (indices_from_pool=KV):
nothing of the stack is assembled here.
"""

from __future__ import annotations

from typing import Any, Mapping

from conformance.live.layouts.hiradix.session import configure as configure_hiradix
from conformance.live.layouts.hiradix_dsa.sidecar import IndexerSidecar
from conformance.live.layouts.hiradix_dsa.tier import LatentRows, dsa_device_tier
from conformance.live.runtime import Runtime
from conformance.live.session import LiveSession


def configure(runtime: Runtime, fields: Mapping[str, Any]) -> None:
    """C1/C2: the same parsers as the class's MHA build."""
    configure_hiradix(runtime, fields)


class HiRadixDsaSession(LiveSession):
    """One upstream HiRadixCache instance on a DSA device pool for one test."""

    CLASS_NAME = "HiRadixCache"

    def build(self) -> Any:
        m = self.runtime.modules
        device_pool, self.allocator, req_pool = dsa_device_tier(self.runtime, self.env, self.device_pages)
        self.kv = LatentRows(device_pool)
        params = m["cache_init_params"].CacheInitParams(
            disable=False, req_to_token_pool=req_pool, token_to_kv_pool_allocator=self.allocator,
            page_size=self.env.page_size, tp_cache_group=self.group)
        cache = m["hiradix_cache"].HiRadixCache(params, self.args)
        storage = m["hicache_storage"]
        self.kv_host = cache.full_kv_pool_host
        self.sidecars = [IndexerSidecar(device_pool, cache.token_to_kv_pool_host.get_pool(storage.PoolName.INDEXER), storage,
                                        self.storage_file_name)]
        return cache
