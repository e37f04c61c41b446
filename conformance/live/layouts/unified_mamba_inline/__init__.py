"""0.5.20/0.5.21's UnifiedRadixCache on a hybrid mamba model: the mamba build of layouts/unified_mamba, the drain of layouts/unified_inline."""

from conformance.live.layouts.unified_inline import inline
from conformance.live.layouts.unified_mamba import LAYOUT as UNIFIED_MAMBA

LAYOUT = inline(UNIFIED_MAMBA, "UnifiedRadixCache+mamba/inline", "the 0.5.20/0.5.21 mamba build",
                "conformance.live.layouts.unified_mamba_inline.session:UnifiedMambaInlineSession")
