"""The mamba state pool of the fork's HiMambaRadixCache as a sidecar: one recurrent state per prefix end.

Hit policy TRAILING_PAGES, one host slot of its own, stored as
'<hash>.mamba' under the last page's hash. A state's bytes are the conv
tensors of every mamba layer, then the temporal tensor, at one slot.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from conformance.adapter import PoolLayout
from conformance.live.sidecar import Sidecar
from conformance.live.taps import Taps, tensor_digest
from conformance.live.taps.host import tap_attach, tap_host_pool
from conformance.live.tiers import accounting
from spec.fence import HitPolicy
from spec.trace import EventKind

MAMBA = "mamba"


class MambaStates:
    """Bytes <-> upstream's conv and temporal tensors of every mamba layer, at one state slot."""

    def __init__(self, state: Any) -> None:
        self.state = state  # upstream's mamba_cache: .conv (a list of tensors), .temporal

    def tensors(self, slot: torch.Tensor) -> list[torch.Tensor]:
        return [conv[:, slot] for conv in self.state.conv] + [self.state.temporal[:, slot]]

    def write(self, slot: torch.Tensor, raw: torch.Tensor) -> None:
        offset = 0
        for target in [*self.state.conv, self.state.temporal]:
            part = target[:, slot]
            n = part.numel() * part.element_size()
            target[:, slot] = raw[offset : offset + n].view(part.dtype).reshape(part.shape)
            offset += n

    def read(self, slot: torch.Tensor) -> torch.Tensor:
        return torch.cat([t.contiguous().view(-1).view(torch.uint8) for t in self.tensors(slot)]).reshape(1, -1)

    def nbytes(self) -> int:
        return sum(p.numel() * p.element_size() for p in (t[:, 0] for t in self.tensors(torch.zeros(1, dtype=torch.long))))


class MambaSidecar(Sidecar):
    name = MAMBA

    def __init__(self, cache: Any, req_pool: Any, runtime_modules: dict, file_name: Callable[[str], str]) -> None:
        self.cache = cache
        self.req_pool = req_pool
        self.modules = runtime_modules
        self.file_name = file_name
        self.host = self.host_pool()
        self.states = MambaStates(req_pool.mamba_pool.mamba_cache)
        self.layout = PoolLayout(MAMBA, "state", (self.states.nbytes(),), torch.uint8, HitPolicy.TRAILING_PAGES)
        self.trace: Any = None

    def host_pool(self) -> Any:
        """The cache's state host pool (a unified tree's is its MAMBA component's)."""
        return self.cache.mamba_pool_host

    def tap(self, taps: Taps) -> None:
        self.trace = taps.trace
        tap_host_pool(taps, self.host, MAMBA)
        tap_attach(taps, self.cache.mamba_host_lru_list, MAMBA, "mamba_host_value")

    def alloc_state(self) -> torch.Tensor:
        allocator = state_allocator(self.req_pool)
        slot = allocator.alloc(1)
        if slot is None:
            self.cache.evict(self.modules["base_prefix_cache"].EvictParams(mamba_num=1))
            slot = allocator.alloc(1)
        if slot is None:
            raise AssertionError("sglang-live: no device mamba slot after evicting one")
        return slot

    def evict_fields(self) -> dict[str, Any]:
        return {"mamba_num": 1 << 30}

    def evict_host(self) -> None:
        self.cache.evict_mamba_host(1 << 30)

    def has_host_hit(self, match: Any) -> bool:
        return bool(getattr(match, "mamba_host_hit_length", 0))

    def record_load_back(self, match: Any, host_pages: list[tuple[int, str]]) -> None:
        node = match.best_match_node
        if node.mamba_host_value is None or node.mamba_value is not None or not node.hash_value:
            return
        slot = int(node.mamba_host_value[0])
        key = self.file_name(f"{node.hash_value[-1]}.{MAMBA}")
        digest = tensor_digest(self.host.get_data_page(slot, flat=True))
        self.trace.record(EventKind.LOAD_BACK, pool=MAMBA, slots=[slot], keys=[key], digests=[digest])

    def loaded(self, match: Any, device_slots: torch.Tensor) -> torch.Tensor | None:
        node = match.last_device_node
        if not len(match.device_indices) or node.mamba_value is None:
            return None
        return self.states.read(node.mamba_value)

    def probe_transfer(self) -> Any:
        """A mamba state's transfer (every operation of this cache is the hybrid controller's)."""
        storage = self.modules["hicache_storage"]
        return storage.PoolTransfer(name=storage.PoolName.MAMBA, keys=["probe"], hit_policy=storage.PoolHitPolicy.TRAILING_PAGES)

    def accounting(self) -> dict[str, tuple[int, int, int]]:
        return {"host:mamba": accounting(self.host), "device:mamba": accounting(state_allocator(self.req_pool))}


def state_allocator(req_pool: Any) -> Any:
    """The device state slots' allocator: an object of its own from 2026-06 on (mamba_allocator), the mamba pool itself
    before (read off the pool the session built, never from a version)."""
    allocator = getattr(req_pool, "mamba_allocator", None)
    return allocator if allocator is not None else req_pool.mamba_pool
