"""0.5.2x's UnifiedRadixCache on a DSA device pool: the unified session (layouts/unified) on the DSA tier (layouts/hiradix_dsa).

Nothing of the host stack is assembled here: init_hicache's own assembler
builds the host pool group (KV and the indexer) and the controller.
"""

from __future__ import annotations

from typing import Any

from conformance.live.layouts.hiradix_dsa.sidecar import IndexerSidecar
from conformance.live.layouts.hiradix_dsa.tier import LatentRows, dsa_device_tier
from conformance.live.layouts.unified.session import UnifiedSession, configure  # noqa: F401  (the adapter's C1/C2 entry)


class UnifiedDsaSession(UnifiedSession):
    def build(self) -> Any:
        m = self.runtime.modules
        device_pool, self.allocator, req_pool = dsa_device_tier(self.runtime, self.env, self.device_pages)
        self.kv = LatentRows(device_pool)
        cache = self.build_unified(req_pool)
        storage = m["hicache_storage"]
        self.sidecars = [IndexerSidecar(device_pool, cache.host_pool_group.get_pool(storage.PoolName.INDEXER), storage,
                                        self.storage_file_name)]
        return cache
