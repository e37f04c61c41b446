"""The fork's HiRadixCache on a plain MHA KV pool: no extra pool (its one sidecar, the DSA indexer, is hiradix_dsa's build)."""

from conformance.live.layout import Layout

LAYOUT = Layout(
    key="HiRadixCache",
    class_name="HiRadixCache",
    module_file="srt/mem_cache/hiradix_cache.py",
    layout_name="the fork's layout",
    session="conformance.live.layouts.hiradix.session:HiRadixSession",
    modules={"hiradix_cache": "sglang.srt.mem_cache.hiradix_cache"},
    capabilities=frozenset({"multi_rank", "kv_formats"}),
)
