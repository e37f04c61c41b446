"""window_counts_leading_pages: unified_radix with a sliding window that counts a window loaded once its leading pages arrived.

The window's transfer ends with some pages loaded and the rest failed; the
operation publishes the window as loaded for the hit whenever its first
page arrived. A window whose first page is the one missing is dropped, as
it should be, and so a test that loses the first page (or whichever a
sorted file list puts first) passes; lose the last page instead and the
commit attaches a window with a page of garbage in it.

Must be caught by: F10 (conformance/suite/test_damaged_pages.py, the
window's last page).
"""

from __future__ import annotations

from typing import Sequence

from caches.core.operation import InFlightIO, PrefetchOperation
from caches.unified_radix import UnifiedRadixCache
from caches.variants._adapter import VariantAdapter, variant_of
from spec.fence import HitPolicy


class LeadingPagesWindowOperation(PrefetchOperation):
    def end_io(self, start: InFlightIO, pool: str, ok_slots: Sequence[int], failed_slots: Sequence[int] = (), *,
               tokens: int = 0, pages: int | None = None) -> bool:
        if self.plan(pool).hit_policy is HitPolicy.TRAILING_WINDOW and len(ok_slots) and not pages:
            pages = len(self.hash_value)  # the defect: the leading pages arrived, so the window counts as loaded
        return super().end_io(start, pool, ok_slots, failed_slots, tokens=tokens, pages=pages)


class WindowCountsLeadingPagesCache(UnifiedRadixCache):
    name = "window_counts_leading_pages"
    operation_class = LeadingPagesWindowOperation


def window_counts_leading_pages() -> VariantAdapter:
    return variant_of("unified_radix_swa", "window_counts_leading_pages", WindowCountsLeadingPagesCache)
