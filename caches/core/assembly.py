"""How a cache is put together from its configuration: pools, slot groups, reducers, storage.

Plain functions the cache's constructor calls once; nothing here runs later.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from caches.config import CacheConfig
from caches.core.pools import HitPolicy, PoolSet, PoolSpec
from caches.core.reducer import LocalReducer, Reducer, TorchDistReducer
from caches.core.slots import KV_GROUP, STATE_GROUP, SlotGroup
from caches.storage import FileStorage, MemoryStorage, StorageBackend, StorageConfigError
from caches.storage.namespace import StorageNamespace
from spec.errors import ConfigError
from spec.fence import window_pages
from spec.trace import DEVICE, HOST, TraceRecorder


@dataclass(frozen=True)
class CachePools:
    """Every pool of a cache, on both tiers: "kv" first, then the other pools.

    token_pools live in the KV slot numbers (KV and the pools sharing them);
    window_pools are token pools with a slot group of their own, named after
    the pool (TRAILING_WINDOW, owned per node by the cache's hooks);
    state_pools hold one slot per prefix end.
    """

    specs: list[PoolSpec]
    device: PoolSet
    host: PoolSet

    @property
    def token_pools(self) -> list[str]:
        return [s.name for s in self.specs if s.unit == "token" and (s.name == "kv" or s.shares_kv_slots)]

    @property
    def window_pools(self) -> list[str]:
        return [s.name for s in self.specs if s.hit_policy is HitPolicy.TRAILING_WINDOW]

    @property
    def trailing_pools(self) -> list[str]:
        """Pools attached for exactly one prefix length (F4, F10), in the order the commit collective carries them."""
        return [*self.state_pools, *self.window_pools]

    @property
    def state_pools(self) -> list[str]:
        return [s.name for s in self.specs if s.unit == "state"]


def check_extra_pools(name: str, supported: frozenset[str], required: frozenset[str], config: CacheConfig) -> None:
    pools = set(config.extra_pools)
    unsupported = pools - supported
    if unsupported:
        accepted = ", ".join(sorted(supported)) or "none"
        raise ConfigError("extra_pools", sorted(unsupported), f"{name} supports extra pools: {accepted}")
    missing = required - pools
    if missing:
        raise ConfigError("extra_pools", sorted(pools), f"{name} needs extra pools: {', '.join(sorted(required))}")


def build_pools(config: CacheConfig, device: torch.device) -> CachePools:
    dtype = config.torch_dtype
    specs = [PoolSpec.kv(config.kv_elem_shape, config.torch_kv_dtype)]
    if "indexer" in config.extra_pools:
        specs.append(PoolSpec.indexer(config.indexer_elem_shape, dtype))
    if "mamba" in config.extra_pools:
        specs.append(PoolSpec.mamba(config.state_elem_shape, dtype))
    if "swa" in config.extra_pools:
        specs.append(PoolSpec.swa(config.swa_elem_shape, dtype, window_pages(config.swa_window_tokens, config.page_size) * config.page_size))

    def sizes(tier: str) -> dict[str, int]:
        tokens = (config.device_pages if tier == DEVICE else config.host_pages) * config.page_size
        states = config.state_device_slots if tier == DEVICE else config.state_host_slots
        window = (config.swa_device_pages if tier == DEVICE else config.swa_host_pages) * config.page_size
        return {s.name: (states if s.unit == "state" else window if s.window_tokens else tokens) for s in specs}

    return CachePools(specs, PoolSet.device(specs, sizes(DEVICE), device), PoolSet.host(specs, sizes(HOST), device))


def slot_groups(config: CacheConfig, pools: CachePools) -> list[SlotGroup]:
    """KV pages for the token pools; one slot per state for the state pools; pages of its own for each window pool."""
    groups = [SlotGroup(KV_GROUP, config.page_size, tuple(pools.token_pools), {DEVICE: config.device_pages, HOST: config.host_pages})]
    if pools.state_pools:
        groups.append(SlotGroup(STATE_GROUP, 1, tuple(pools.state_pools), {DEVICE: config.state_device_slots, HOST: config.state_host_slots}))
    for pool in pools.window_pools:  # the group is named after its pool
        groups.append(SlotGroup(pool, config.page_size, (pool,), {DEVICE: config.swa_device_pages, HOST: config.swa_host_pages}))
    return groups


def build_reducers(process_group: Any, device: torch.device, trace: TraceRecorder) -> tuple[Reducer, Reducer, list[Any]]:
    """(the scheduler's reducer, the prefetch thread's reducer, groups created here to destroy at close)."""
    if process_group is None:
        return LocalReducer(), LocalReducer(), []
    import torch.distributed as dist

    backend = dist.get_backend(process_group)
    on = device if backend == "nccl" else torch.device("cpu")
    # The prefetch thread gets a group of its own: collectives from two
    # threads on one group would interleave differently on each rank.
    ranks = dist.get_process_group_ranks(process_group)
    if len(ranks) == dist.get_world_size():
        hit_group = dist.new_group(ranks=ranks, backend=backend)
        return TorchDistReducer(process_group, trace, device=on), TorchDistReducer(hit_group, trace, device=on), [hit_group]
    # A world of several deployments (one per tensor-parallel group) builds each one's cache on its own ranks: the
    # group is made by its members alone, so torch names it after its ranks. It is kept past close(): a later
    # group over the same ranks would take the freed name, and the old rendezvous keys in the store would hang it.
    hit_group = dist.new_group(ranks=ranks, backend=backend, use_local_synchronization=True)
    return TorchDistReducer(process_group, trace, device=on), TorchDistReducer(hit_group, trace, device=on), []


def open_storage(config: CacheConfig, namespace: StorageNamespace) -> StorageBackend:
    if config.storage_backend == "memory":
        return MemoryStorage()  # private to this cache: nothing else can read or write it
    # One folder per namespace (caches/storage/namespace.py); each rank stores its own shard of every page.
    try:
        return FileStorage(namespace.rank_root(config.storage_path), namespace=namespace.tag,
                           read_timeout_s=config.storage_read_timeout_s)
    except OSError as exc:
        raise ConfigError("storage_path", config.storage_path, f"a writable directory ({config.storage_path} is unusable: {exc})") from None
    except StorageConfigError as exc:
        raise ConfigError("storage_path", config.storage_path, f"a writable directory ({exc})") from None
