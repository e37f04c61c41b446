"""0.5.20/0.5.21's UnifiedRadixCache on a DSA model's KV: the DSA build of layouts/unified_dsa, the drain of layouts/unified_inline."""

from conformance.live.layouts.unified_dsa import LAYOUT as UNIFIED_DSA
from conformance.live.layouts.unified_inline import inline

LAYOUT = inline(UNIFIED_DSA, "UnifiedRadixCache+dsa/inline", "the 0.5.20/0.5.21 DSA build",
                "conformance.live.layouts.unified_dsa_inline.session:UnifiedDsaInlineSession")
