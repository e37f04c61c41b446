"""The sliding-window pool of a UnifiedRadixCache as a sidecar: a TRAILING_WINDOW token pool.

A token's window rows live at the window slot its full-attention slot maps
to (the allocator's translate_loc_from_full_to_swa); a node's SWA value holds
those window slots, or nothing where the tree dropped the window (a
tombstone). What a load-back served is read as upstream's attention reads
it: the SWA values on the matched path, over the window before the match
end; a path missing one of them serves no window.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Mapping

import torch

from conformance.live.sidecar import Sidecar
from conformance.live.taps import Taps, wrap
from conformance.live.taps.host import tap_host_pool
from conformance.live.tiers import MhaRows, accounting
from spec.fence import HitPolicy

SWA = "swa"


class SwaSidecar(Sidecar):
    name = SWA
    COMPONENTS_MODULE = "tree_component"  # the module (short name) of upstream's ComponentType

    def __init__(self, cache: Any, rows: MhaRows, window_tokens: int, runtime_modules: dict) -> None:
        self.cache = cache
        self.rows = rows
        self.modules = runtime_modules
        self.window_tokens = window_tokens
        self.layout = replace(rows.layout, name=SWA, hit_policy=HitPolicy.TRAILING_WINDOW, window_tokens=window_tokens)
        self.host = self.component()._swa_kv_pool_host

    def _type(self) -> Any:
        return self.modules[self.COMPONENTS_MODULE].ComponentType.SWA

    def component(self) -> Any:
        return self.cache.components[self._type()]

    def device_value(self, node: Any) -> Any:
        """The node's window slots (None: a tombstone)."""
        return node.component_data[self._type()].value

    def root(self) -> Any:
        return self.cache.root_node

    def tap(self, taps: Taps) -> None:
        """The window's host slots, and those a prefetch's commit attaches to the tree (one slice per node it fills)."""
        tap_host_pool(taps, self.host, SWA)

        def attaching(original: Callable) -> Callable:
            def wrapper(node: Any, host_indices: Any, *args: Any, **kwargs: Any) -> Any:
                result = original(node, host_indices, *args, **kwargs)
                taps.inserted(taps.ctx.op, host_indices.tolist(), pool=SWA)
                return result
            return wrapper

        wrap(self.component(), "_attach_swa_host_value", attaching)

    def stage(self, slots: torch.Tensor, data: Mapping[str, torch.Tensor]) -> None:
        self.rows.write(self.cache.token_to_kv_pool_allocator.translate_loc_from_full_to_swa(slots), data[SWA])

    def evict_fields(self) -> dict[str, Any]:
        return {"swa_num_tokens": 1 << 30}

    def evict_host(self) -> None:
        self.cache.evict_host(1 << 30, self._type())

    def has_host_hit(self, match: Any) -> bool:
        return bool(getattr(match, "swa_host_hit_length", 0))

    def loaded(self, match: Any, device_slots: torch.Tensor) -> torch.Tensor | None:
        """The window rows on the matched path before its end; None where a node within the window has none."""
        tokens = len(device_slots)
        want = min(self.window_tokens, tokens)
        chunks, held, node = [], 0, match.last_device_node
        while want and held < want and node is not None and node is not self.root():
            value = self.device_value(node)
            if value is None:
                return None
            chunks.insert(0, value)
            held += len(value)
            node = node.parent
        if not want or held < want:
            return None
        return self.rows.read(torch.cat(chunks)[-want:].to(torch.int64))

    def probe_transfer(self) -> Any:
        storage = self.modules["hicache_storage"]
        return storage.PoolTransfer(name=storage.PoolName.SWA, keys=["probe"], hit_policy=storage.PoolHitPolicy.TRAILING_PAGES)

    def accounting(self) -> dict[str, tuple[int, int, int]]:
        return {"host:swa": accounting(self.host), "device:swa": accounting(self.cache.token_to_kv_pool_allocator.swa_attn_allocator)}
