"""Every upstream layout the harness runs live, one package each: its declaration (__init__.py), its session, its taps.

The order is the matrix's row order. Adding a layout: a package here with a
LAYOUT (conformance/live/layout.py), a session composed of the seams in
conformance/live/ and, where upstream records elsewhere, taps of its own;
then its line below (docs/contributing.md, "A new upstream layout").
"""

from __future__ import annotations

from conformance.live.layout import Layout
from conformance.live.layouts import (hi_mamba, hiradix, hiradix_drain, hiradix_dsa, hiradix_dsa_drain, hiradix_dsa_hit_drain, hiradix_hit_drain, hiradix_threads, unified,
                                      unified_dsa, unified_dsa_inline,
                                      unified_fork, unified_fork_mamba, unified_fork_swa,
                                      unified_inline, unified_mamba, unified_mamba_inline, unified_swa, unified_swa_inline)

LAYOUTS: tuple[Layout, ...] = (hiradix.LAYOUT, hiradix_threads.LAYOUT, hiradix_hit_drain.LAYOUT, hiradix_drain.LAYOUT, hiradix_dsa.LAYOUT, hiradix_dsa_drain.LAYOUT, hiradix_dsa_hit_drain.LAYOUT, hi_mamba.LAYOUT, unified_fork.LAYOUT, unified.LAYOUT,
                             unified_inline.LAYOUT, unified_dsa.LAYOUT, unified_dsa_inline.LAYOUT,
                             unified_mamba.LAYOUT, unified_mamba_inline.LAYOUT, unified_fork_mamba.LAYOUT,
                             unified_fork_swa.LAYOUT, unified_swa.LAYOUT, unified_swa_inline.LAYOUT)
BY_KEY = {layout.key: layout for layout in LAYOUTS}
CLASS_FILES = {layout.class_name: layout.module_file for layout in LAYOUTS}  # class -> its module (one per class)
