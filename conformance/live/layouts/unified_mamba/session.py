"""0.5.2x's UnifiedRadixCache with its mamba component: the unified session (layouts/unified) on a hybrid mamba device
tier (layouts/hi_mamba), the state pool a sidecar read through the tree core.

A request's state enters the tree as upstream's scheduler caches one: a
fresh device mamba slot holding the state, inserted with the tokens (freed
where the tree already held one, mamba_exist); a load-back takes the
scheduler's Req, which gets a state slot of its own (copy-on-write).
The fork's UnifiedRadixCache has the same component on its own tree
(layouts/unified_fork_mamba): MambaComponentSession is what both share.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import torch

from conformance.live import evidence
from conformance.live.layout import Layout
from conformance.live.layouts.hi_mamba.session import mamba_device_tier, write_with_state
from conformance.live.layouts.hi_mamba.sidecar import MAMBA, MambaSidecar
from conformance.live.layouts.unified_mamba import LAYOUT
from conformance.live.layouts.unified.session import UnifiedSession, configure  # noqa: F401  (the adapter's C1/C2 entry)
from conformance.live.taps import Taps, wrap
from conformance.live.taps.host import tap_host_pool


def free_request_state(req_pool: Any, req: Any) -> None:
    """A load-back copies the state into a slot of the request's own (copy-on-write); the scheduler frees it when the
    request finishes (HybridReqToTokenPool.free_mamba_cache), the tree keeps its own."""
    kv = getattr(req, "kv", req)  # 0.5.22+ keeps a request's pool indices on req.kv
    slot = getattr(kv, "mamba_pool_idx", None)
    if slot is not None:
        req_pool.mamba_allocator.free(slot.reshape(1))
        kv.mamba_pool_idx = None


class UnifiedMambaSidecar(MambaSidecar):
    """The mamba state pool of a UnifiedRadixCache: its host pool is the MAMBA component's; a node's state is read through
    the tree core's interface (the Rust core, 0.5.23's default, has no Python nodes), and recorded where upstream moves it.

    A state's host slot is attached to the tree by the tree core's PREFETCH commit
    (commit_hicache_transfers: not mamba_exist); a load-back's host slots are
    the MAMBA transfer of the queued load (unified taps.tap_load_back).
    """

    COMPONENTS_MODULE = "components"  # the module (short name) of upstream's ComponentType and CacheTransferPhase

    def _component(self) -> Any:
        return self.modules[self.COMPONENTS_MODULE].ComponentType.MAMBA

    def host_pool(self) -> Any:
        return self.cache.components[self._component()]._mamba_pool_host

    def prefetch_commit(self) -> tuple[Any, str]:
        """(object, method) of the PREFETCH commit that attaches a state's host slot to the tree."""
        return self.cache.tree_core, "commit_hicache_transfers"

    def mamba_transfers(self, transfers: Any) -> Sequence[Any]:
        """The MAMBA transfers of the commit's transfers argument (the tree core's: by component)."""
        return (transfers or {}).get(self._component()) or ()

    def device_value(self, node: Any) -> Any:
        return self.cache.tree_core.get_component_device_value(node, self._component())

    def tap(self, taps: Taps) -> None:
        self.trace = taps.trace
        tap_host_pool(taps, self.host, MAMBA)
        prefetch = self.modules[self.COMPONENTS_MODULE].CacheTransferPhase.PREFETCH

        def committing(original: Callable) -> Callable:
            def wrapper(node: Any, phase: Any, transfers: Any = (), *args: Any, **kwargs: Any) -> Any:
                result = original(node, phase, transfers, *args, **kwargs)
                inserted, mamba = kwargs.get("insert_result"), self.mamba_transfers(transfers)
                if phase == prefetch and inserted is not None and not inserted.mamba_exist and mamba \
                        and mamba[0].host_indices is not None:
                    taps.inserted(taps.ctx.op, mamba[0].host_indices.tolist(), pool=MAMBA)
                return result
            return wrapper

        wrap(*self.prefetch_commit(), committing)

    def evict_host(self) -> None:
        self.cache.evict_host(1 << 30, self._component())

    def record_load_back(self, match: Any, host_pages: list[tuple[int, str]]) -> None:
        """Recorded from the queued load itself (its MAMBA transfer)."""

    def loaded(self, match: Any, device_slots: torch.Tensor) -> torch.Tensor | None:
        node = match.last_device_node
        if node is None or not len(device_slots):
            return None
        value = self.device_value(node)
        return None if value is None else self.states.read(value)


class MambaComponentSession:
    """What a UnifiedRadixCache session with the MAMBA component adds (mixed in before the layout's session class): the
    hybrid mamba device tier, the state sidecar, the request's copy-on-write slot freed, writes with their state."""

    TREE_COMPONENTS = ("FULL", "MAMBA")
    LAYOUT: Layout
    SIDECAR: type[UnifiedMambaSidecar]

    def mem_layout(self) -> str:
        return evidence.host_layout_of(self.runtime.tree, self.LAYOUT)[0] or super().mem_layout()

    def build(self) -> Any:
        self.req_pool = mamba_device_tier(self)
        cache = self.build_unified(self.req_pool, enable_mamba_extra_buffer=True)
        self.mamba = self.SIDECAR(cache, self.req_pool, self.runtime.modules, self.storage_file_name)
        self.sidecars = [self.mamba]
        return cache

    def request_finished(self, req: Any) -> None:
        free_request_state(self.req_pool, req)

    def write(self, tokens: Sequence[int], data: Mapping[str, torch.Tensor]) -> None:
        write_with_state(self, tokens, data)


class UnifiedMambaSession(MambaComponentSession, UnifiedSession):
    LAYOUT = LAYOUT
    SIDECAR = UnifiedMambaSidecar
