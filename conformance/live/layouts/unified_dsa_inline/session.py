"""0.5.20/0.5.21's UnifiedRadixCache on a DSA device pool: the DSA session, tapped as the 0.5.21 drain allocates."""

from __future__ import annotations

from conformance.live.layouts.unified.session import configure  # noqa: F401  (the adapter's C1/C2 entry)
from conformance.live.layouts.unified_dsa.session import UnifiedDsaSession
from conformance.live.layouts.unified_inline.session import tap_inline


class UnifiedDsaInlineSession(UnifiedDsaSession):
    def tap(self) -> None:
        tap_inline(self)
