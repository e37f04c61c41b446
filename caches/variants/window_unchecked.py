"""window_unchecked: unified_radix with a sliding window whose match ends ignore the window.

Its sliding-window component accepts every node as a match end, whether or
not the window before it carries the pool's data: upstream's SWA match
validator left out. When a window transfer fails, or is still running when
the prefetch is terminated, the commit drops the window (rightly) yet the
committed KV is served as a match, and the sliding-window layers would read
a window that is not there.

Must be caught by: F10 (a match served without its window), and by nothing
else: the bytes it does serve are right.
"""

from __future__ import annotations

from caches.core.tree import TreeNode
from caches.unified.swa import SlidingWindow
from caches.unified_radix import UnifiedRadixCache
from caches.variants._adapter import VariantAdapter, variant_of


class UncheckedWindow(SlidingWindow):
    def accepts_match_end(self, node: TreeNode) -> bool:
        return True  # the defect: no check that the window before `node` is present


class WindowUncheckedCache(UnifiedRadixCache):
    name = "window_unchecked"
    window_component = UncheckedWindow


def window_unchecked() -> VariantAdapter:
    return variant_of("unified_radix_swa", "window_unchecked", WindowUncheckedCache)
