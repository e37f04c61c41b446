"""0.5.20/0.5.21's UnifiedRadixCache: the unified session, its hit recorded where the drain allocates it inline."""

from __future__ import annotations

from conformance.live.layouts.hiradix_drain.taps import tap_inline_hit_allocation
from conformance.live.layouts.unified.session import UnifiedSession, configure  # noqa: F401  (the adapter's C1/C2 entry)


class UnifiedInlineSession(UnifiedSession):
    TAP_ALLOCATION = staticmethod(tap_inline_hit_allocation)
