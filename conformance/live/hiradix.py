"""Upstream's HiRadixCache, built from the user's tree on CPU, behind the CacheUnderTest protocol.

Built with upstream's own classes: MHATokenToKVPool (CPU), its paged
allocator, MHATokenToKVPoolHost (layer_first, io backend "direct"),
HiCacheController and the HiCacheFile backend, configured through ServerArgs
and the storage backend's extra config, as a user configures them. On a plain
MHA KV pool it has no extra pool: its only sidecar (the DSA indexer) comes
with DSA models, whose device pool asserts page_size == 64.
"""

from __future__ import annotations

from typing import Any, Mapping

from conformance.live.runtime import Runtime
from conformance.live.session import LiveSession, configure_through


def configure(runtime: Runtime, fields: Mapping[str, Any]) -> None:
    """C1/C2 through upstream's CLI parser and HiRadixCache's extra-config parser."""
    configure_through(runtime, fields, runtime.module("hiradix_cache").HiRadixCache._parse_storage_backend_extra_config)


class HiRadixSession(LiveSession):
    """One upstream HiRadixCache instance for one test."""

    CLASS_NAME = "HiRadixCache"

    def build(self) -> Any:
        m, ps = self.runtime.modules, self.env.page_size
        self.device_pool, self.allocator, req_pool = self.mha_device_tier()
        params = m["cache_init_params"].CacheInitParams(
            disable=False, req_to_token_pool=req_pool, token_to_kv_pool_allocator=self.allocator,
            page_size=ps, tp_cache_group=self.group)
        cache = m["hiradix_cache"].HiRadixCache(params, self.args)
        self.kv_host = cache.cache_controller.mem_pool_host
        return cache

    def observe(self) -> None:
        self.taps.tap_barrier(self.cache, "_barrier_attn_groups")
