"""HiRadixCache of the hit-drain layout on a DSA model's KV: the hit-drain session (hiradix_hit_drain) on the DSA build (hiradix_dsa)."""

from __future__ import annotations

from typing import Any

from conformance.live.layouts.hiradix_dsa.session import build_dsa
from conformance.live.layouts.hiradix_hit_drain.session import HitDrainSession, configure  # noqa: F401  (the adapter's C1/C2 entry)


class HitDrainDsaSession(HitDrainSession):
    def build(self) -> Any:
        return build_dsa(self)
