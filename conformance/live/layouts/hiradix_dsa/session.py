"""Upstream's HiRadixCache on a DSA model's KV, built from the user's tree on CPU through upstream's own assembler.

The device pool is a DSATokenToKVPool (latent KV and the indexer, bf16, two
layers); HiRadixCache sees it and calls attach_hybrid_dsa_pool_to_hiradix_cache,
which builds the host pool group (MLATokenToKVPoolHost and DSAIndexerPoolHost),
the HybridCacheController and the INDEXER transfer (indices_from_pool=KV):
nothing of the stack is assembled here.
"""

from __future__ import annotations

from typing import Any, Mapping

from conformance.live.layouts.hiradix.session import configure as configure_hiradix, observe_own_collectives
from conformance.live.layouts.hiradix_dsa.sidecar import IndexerSidecar
from conformance.live.layouts.hiradix_dsa.tier import LatentRows, dsa_device_tier
from conformance.live.runtime import Runtime
from conformance.live.session import LiveSession


def configure(runtime: Runtime, fields: Mapping[str, Any]) -> None:
    """C1/C2: the same parsers as the class's MHA build."""
    configure_hiradix(runtime, fields)


def dsa_tier(session: LiveSession) -> tuple[Any, Any]:
    """The DSA device tier on the session (its allocator and latent rows); (the device pool, the request pool)."""
    device_pool, session.allocator, req_pool = dsa_device_tier(session.runtime, session.env, session.device_pages)
    session.kv = LatentRows(device_pool)
    return device_pool, req_pool


def pool_of(host_pools: Any, name: Any) -> Any:
    """One host pool of upstream's host pool group, by its PoolName (a group without get_pool, before 2026-04, keeps
    its entries in entry_map)."""
    if hasattr(host_pools, "get_pool"):
        return host_pools.get_pool(name)
    return host_pools.entry_map[name].host_pool


def attach_indexer(session: LiveSession, device_pool: Any, host_pools: Any) -> None:
    """The indexer as the session's sidecar: upstream's INDEXER host pool out of the host pool group its assembler built."""
    storage = session.runtime.modules["hicache_storage"]
    session.sidecars = [IndexerSidecar(device_pool, pool_of(host_pools, storage.PoolName.INDEXER), storage, session.storage_file_name)]


def build_dsa(session: LiveSession) -> Any:
    """The DSA device tier, then upstream's own HiRadixCache on it (its assembler builds the rest); sets the session's tiers and sidecar."""
    m = session.runtime.modules
    device_pool, req_pool = dsa_tier(session)
    params = m["cache_init_params"].CacheInitParams(
        disable=False, req_to_token_pool=req_pool, token_to_kv_pool_allocator=session.allocator,
        page_size=session.env.page_size, tp_cache_group=session.group)
    cache = m["hiradix_cache"].HiRadixCache(params, session.args)
    session.kv_host = cache.full_kv_pool_host
    attach_indexer(session, device_pool, cache.token_to_kv_pool_host)
    observe_own_collectives(session.runtime)
    return cache


class HiRadixDsaSession(LiveSession):
    """One upstream HiRadixCache instance on a DSA device pool for one test (the fork's layout)."""

    CLASS_NAME = "HiRadixCache"

    def build(self) -> Any:
        return build_dsa(self)
