"""0.5.20/0.5.21's UnifiedRadixCache: the unified session, its hit recorded where the drain allocates it inline."""

from __future__ import annotations

from conformance.live.layouts.hiradix_drain.taps import tap_inline_hit_allocation
from conformance.live.layouts.unified.session import UnifiedSession, configure  # noqa: F401  (the adapter's C1/C2 entry)
from conformance.live.layouts.unified.taps import tap_ack_drain_controller, tap_load_back, tap_unified_cache
from conformance.live.taps import KV
from conformance.live.taps.host import tap_host_pool
from conformance.live.taps.storage import tap_storage


def tap_inline(session: UnifiedSession) -> None:
    """The unified taps, with the hit taken at the drain's inline allocation instead of allocate_storage_hit."""
    tap_host_pool(session.taps, session.kv_host, KV)
    session.acks = tap_ack_drain_controller(session.taps, session.cc, tap_inline_hit_allocation)
    tap_load_back(session.taps, session.cc, session.kv_host)
    tap_storage(session.taps, session.backend, session.storage_file_name)
    tap_unified_cache(session.taps, session.cache, session.decision_state)


class UnifiedInlineSession(UnifiedSession):
    def tap(self) -> None:
        tap_inline(self)
