"""python -m conformance.live.compat on hand-written trees: every class of a target runs, or says in one line why not."""

from __future__ import annotations

import sys
from pathlib import Path

from conformance.live.compat import render, survey


def tree(root: Path, files: dict[str, str]) -> Path:
    package = root / "sglang"
    for rel, text in {"__init__.py": "", **files}.items():
        (package / rel).parent.mkdir(parents=True, exist_ok=True)
        (package / rel).write_text(text)
    return root


def test_a_class_not_in_the_target_one_outside_the_wired_layouts_and_one_that_does_not_import_each_say_so(tmp_path):
    root = tree(tmp_path / "t", {
        "srt/mem_cache/hiradix_cache.py": "class HiRadixCache(RadixCache):\n    pass\n",
        "srt/mem_cache/unified_radix_cache.py": "class UnifiedRadixCache:\n    pass\n",
    })
    result = survey(f"{root}@0.4.10", sys.executable)  # this interpreter: the tree's imports fail, as in a broken environment
    classes = result["classes"]
    assert result["target"] == "0.4.10"
    assert classes["HiMambaRadixCache"] == ["not in this target"]
    no_core = "(sglang/srt/mem_cache/unified_cache/unified_tree_core.py does not exist)"
    no_components = "(sglang/srt/mem_cache/unified_cache_components/full_component.py does not exist)"
    assert classes["UnifiedRadixCache"] == [f"not run: `UnifiedRadixCache`: not the fork's layout {no_components}",
                                            f"not run: `UnifiedRadixCache`: not the 0.5.22+ layout {no_core}",
                                            f"not run: `UnifiedRadixCache`: not the 0.5.20/0.5.21 layout {no_core}",
                                            f"not run: `UnifiedRadixCache+dsa`: not the 0.5.22+ DSA build {no_core}",
                                            f"not run: `UnifiedRadixCache+dsa`: not the 0.5.20/0.5.21 DSA build {no_core}",
                                            f"not run: `UnifiedRadixCache+mamba`: not the 0.5.22+ mamba build {no_core}",
                                            f"not run: `UnifiedRadixCache+mamba`: not the 0.5.20/0.5.21 mamba build {no_core}",
                                            f"not run: `UnifiedRadixCache+mamba`: not the fork's mamba build {no_components}",
                                            f"not run: `UnifiedRadixCache+swa`: not the fork's sliding-window build {no_components}",
                                            f"not run: `UnifiedRadixCache+swa`: not the 0.5.22+ sliding-window build {no_core}",
                                            f"not run: `UnifiedRadixCache+swa`: not the 0.5.20/0.5.21 sliding-window build {no_core}"]
    lines = classes["HiRadixCache"]
    assert any(line.startswith("not run: `HiRadixCache` (the fork's layout): --sglang-live: importing sglang.srt.mem_cache.hiradix_cache")
               for line in lines), lines
    assert "not run: `HiRadixCache`: not the 0.5.19/0.5.20 layout (sglang/srt/mem_cache/hiradix_cache.py has no ACK drain " \
           "(_drain_and_alloc_storage_hit))" in lines, "every layout of the class says why it is not the one run"
    assert any("`HiRadixCache+dsa`" in line for line in lines), "the DSA build is refused in a line of its own"
    page = render([result], "python -m conformance.live.compat ...")
    assert "| 0.4.10 | " in page and "not in this target" in page and "\n" not in page.split("| 0.4.10 | ")[1].rstrip("\n")
