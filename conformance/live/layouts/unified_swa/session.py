"""0.5.2x's UnifiedRadixCache with its sliding-window component: the unified session (layouts/unified) on the fork's
hybrid SWA device tier and request allocation (layouts/unified_fork_swa), the window a sidecar read through
interfaces every tree core has (sidecar.py).

Nothing of the host stack is assembled here: init_hicache's own assembler
(its SWA strategy) builds the host pool group (KV and SWA) and the controller.
"""

from __future__ import annotations

from conformance.live.layouts.unified.session import UnifiedSession, configure  # noqa: F401  (the adapter's C1/C2 entry)
from conformance.live.layouts.unified_fork_swa.session import SwaComponentSession
from conformance.live.layouts.unified_swa.sidecar import UnifiedSwaSidecar


class UnifiedSwaSession(SwaComponentSession, UnifiedSession):
    SIDECAR = UnifiedSwaSidecar
