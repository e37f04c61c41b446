"""0.5.20/0.5.21's UnifiedRadixCache on a hybrid sliding-window model: the SWA build of layouts/unified_swa, the drain of layouts/unified_inline."""

from conformance.live.layouts.unified_inline import inline
from conformance.live.layouts.unified_swa import LAYOUT as UNIFIED_SWA

LAYOUT = inline(UNIFIED_SWA, "UnifiedRadixCache+swa/inline", "the 0.5.20/0.5.21 sliding-window build",
                "conformance.live.layouts.unified_swa_inline.session:UnifiedSwaInlineSession")
