"""Upstream's HiRadixCache on a plain MHA KV pool, built from the user's tree on CPU.

Built with upstream's own classes: MHATokenToKVPool (CPU), its paged
allocator, MHATokenToKVPoolHost (layer_first, io backend "direct"),
HiCacheController and the HiCacheFile backend, configured through ServerArgs
and the storage backend's extra config, as a user configures them. Its DSA
build (latent KV and the indexer) is the hiradix_dsa layout.
"""

from __future__ import annotations

from typing import Any, Mapping

from conformance.live import collectives
from conformance.live.configuration import configure_through, unparsed_extra_config
from conformance.live.construct import build_from_arguments
from conformance.live.runtime import Runtime
from conformance.live.session import LiveSession
from conformance.live.tiers import mha_device_tier


def configure(runtime: Runtime, fields: Mapping[str, Any]) -> None:
    """C1/C2 through upstream's CLI parser and HiRadixCache's extra-config parser (a tree whose cache has none, before
    2025-10, validates nothing of its extra config: its controller hands it to the storage backend)."""
    parse = getattr(runtime.module("hiradix_cache").HiRadixCache, "_parse_storage_backend_extra_config", None)
    configure_through(runtime, fields, parse or unparsed_extra_config)


def observe_own_collectives(runtime: Runtime) -> None:
    """A tree's HiRadixCache older than its reduce methods (_all_reduce_attn_groups, which the taps wrap) calls
    torch.distributed itself, whatever pools the build has (its DSA build too): its module gets the observed torch."""
    module = runtime.module("hiradix_cache")
    if not hasattr(module.HiRadixCache, "_all_reduce_attn_groups"):
        collectives.install(module)


class HiRadixSession(LiveSession):
    """One upstream HiRadixCache instance for one test."""

    CLASS_NAME = "HiRadixCache"

    def build(self) -> Any:
        m = self.runtime.modules
        device_pool, self.allocator, req_pool, self.kv = mha_device_tier(self.runtime, self.env, self.device_pages)
        parts = dict(req_to_token_pool=req_pool, token_to_kv_pool_allocator=self.allocator, page_size=self.env.page_size,
                     tp_cache_group=self.group)
        if "cache_init_params" not in m:  # a tree older than CacheInitParams: its parts and settings as arguments
            cache = build_from_arguments(self.runtime.tree, m["hiradix_cache"].HiRadixCache, self.args, parts)
        else:
            cache = m["hiradix_cache"].HiRadixCache(m["cache_init_params"].CacheInitParams(disable=False, **parts), self.args)
        self.kv_host = cache.cache_controller.mem_pool_host
        observe_own_collectives(self.runtime)
        return cache
