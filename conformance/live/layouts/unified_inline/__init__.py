"""0.5.20/0.5.21's UnifiedRadixCache: the unified ACK drain before allocate_storage_hit, on its full-attention component.

The same tree core, runtime context and drain as 0.5.22+ (layouts/unified),
except where the drain fixes a hit: a nested `_try_alloc_storage_hit` takes
each operation from prefetch_hit_queue, allocates its host slots inline and
hands it to prefetch_buffer (as 0.5.19/0.5.20's HiRadixCache drain does), so
the hit is recorded there.
"""

from dataclasses import replace

from conformance.live.layout import Layout, Mark
from conformance.live.layouts.unified import ALLOCATE_STORAGE_HIT, LAYOUT as UNIFIED

ALLOCATES_INLINE = (
    replace(ALLOCATE_STORAGE_HIT, what="allocate_storage_hit of the 0.5.22+ drain", absent=True),
    Mark("srt/mem_cache/unified_radix_cache.py", r"def _try_alloc_storage_hit\b", "inline hit allocation in the drain (_try_alloc_storage_hit)"),
)


def inline(layout: Layout, key: str, layout_name: str, session: str) -> Layout:
    """`layout` with the 0.5.20/0.5.21 drain's marks in place of allocate_storage_hit's."""
    marks = tuple(m for mark in layout.marks for m in (ALLOCATES_INLINE if mark is ALLOCATE_STORAGE_HIT else (mark,)))
    return replace(layout, key=key, layout_name=layout_name, session=session, marks=marks)


LAYOUT = inline(UNIFIED, "UnifiedRadixCache/inline", "the 0.5.20/0.5.21 layout",
                "conformance.live.layouts.unified_inline.session:UnifiedInlineSession")
