"""The 0.5.19/0.5.20 HiRadixCache on a DSA model's KV: the drain session (hiradix_drain) on the DSA build (hiradix_dsa)."""

from __future__ import annotations

from typing import Any

from conformance.live.layouts.hiradix_drain.session import HiRadixDrainSession, configure  # noqa: F401  (the adapter's C1/C2 entry)
from conformance.live.layouts.hiradix_dsa.session import build_dsa


class HiRadixDrainDsaSession(HiRadixDrainSession):
    def build(self) -> Any:
        return build_dsa(self)
