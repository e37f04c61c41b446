"""0.5.20/0.5.21's UnifiedRadixCache with its sliding-window component: the SWA session, its hit recorded where the drain allocates it inline."""

from __future__ import annotations

from conformance.live.layouts.hiradix_drain.taps import tap_inline_hit_allocation
from conformance.live.layouts.unified.session import configure  # noqa: F401  (the adapter's C1/C2 entry)
from conformance.live.layouts.unified_swa.session import UnifiedSwaSession


class UnifiedSwaInlineSession(UnifiedSwaSession):
    TAP_ALLOCATION = staticmethod(tap_inline_hit_allocation)
