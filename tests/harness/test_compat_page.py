"""The compatibility page names a target's tree TREE, as its command line does, never the probing machine's path."""

from __future__ import annotations

import sys

from conformance.live.compat import survey


def test_a_tree_that_does_not_import_is_refused_in_a_line_naming_it_tree(tmp_path):
    root = tmp_path / "rel" / "t0.4.10"
    module = root / "sglang" / "srt" / "mem_cache" / "hiradix_cache.py"
    module.parent.mkdir(parents=True)
    (root / "sglang" / "__init__.py").write_text("")
    module.write_text("class HiRadixCache(RadixCache):\n    pass\n")
    controller = root / "sglang" / "srt" / "managers" / "cache_controller.py"  # the fork's layout: the scheduler's own copies
    controller.parent.mkdir(parents=True)
    controller.write_text("class HiCacheController:\n    def start_writing(self):\n        pass\n")
    lines = survey(f"{root}@0.4.10", sys.executable)["classes"]["HiRadixCache"]  # this interpreter: the tree's imports fail
    refused = [line for line in lines if "--sglang-live: importing sglang." in line]
    assert refused and all(" from TREE failed: " in line for line in refused), lines
    assert not any(str(tmp_path) in line for line in lines), lines
