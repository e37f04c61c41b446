"""0.5.2x's UnifiedRadixCache on a DSA device pool: the unified session (layouts/unified) on the DSA tier (layouts/hiradix_dsa).

Nothing of the host stack is assembled here: init_hicache's own assembler
builds the host pool group (KV and the indexer) and the controller.
"""

from __future__ import annotations

from typing import Any

from conformance.live.layouts.hiradix_dsa.session import attach_indexer, dsa_tier
from conformance.live.layouts.unified.session import UnifiedSession, configure  # noqa: F401  (the adapter's C1/C2 entry)


class UnifiedDsaSession(UnifiedSession):
    def build(self) -> Any:
        device_pool, req_pool = dsa_tier(self)
        cache = self.build_unified(req_pool)
        attach_indexer(self, device_pool, cache.host_pool_group)
        return cache
