"""The DSA build under either of upstream's spellings, on hand-written upstream-shaped trees and objects (no upstream code).

Upstream renamed NSA to DSA in 2026-05: before it the same build is
NSATokenToKVPool, NSAIndexerPoolHost and attach_hybrid_nsa_pool_to_hiradix_cache
(at first build_nsa_hybrid_stack). The marks name both spellings, the page
size is read inside whichever pool class the tree defines, the session takes
that class and the host pool group as the tree keeps it, and the indexer's
own allocator is accounted so a slot freed into it twice is S3's.
"""

from __future__ import annotations

import types
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from conformance.live.adapter import adapters_for
from conformance.live.construct import LiveBuildError
from conformance.live.layouts.hiradix_dsa.session import pool_of
from conformance.live.layouts.hiradix_dsa.sidecar import own_allocator_accounting
from conformance.live.layouts.hiradix_dsa.tier import dsa_pool_class, fp8_latent_width
from conformance.live.tree import locate

NSA_HIRADIX = """
class HiRadixCache(RadixCache):
    def __init__(self, params, server_args):
        self.kv_cache = params.token_to_kv_pool_allocator.get_kvcache()
        if isinstance(self.kv_cache, NSATokenToKVPool):
            {assembler}(self, params, server_args)
"""
NSA_MEMORY_POOL = """
class MLATokenToKVPool(KVCache):
    def __init__(self, size, page_size):
        assert self.page_size == 16


class {pool}(MLATokenToKVPool):
    quant_block_size = 128

    def __init__(self, size, page_size, index_head_dim):
        super().__init__(size, page_size)
        if _is_hip:
            assert self.page_size == 1
        else:
            assert self.page_size == 64
"""
NSA_HOST = "class NSAIndexerPoolHost(HostKVCache):\n    pass\n"
DRAIN_HIRADIX = NSA_HIRADIX + """
    def _drain_storage_control_queues_impl(self):
        def _drain_and_alloc_storage_hit():
            pass
"""


def nsa_tree(root: Path, *, assembler: str = "attach_hybrid_nsa_pool_to_hiradix_cache", pool: str = "NSATokenToKVPool",
             hiradix: str = NSA_HIRADIX) -> Path:
    mem_cache = root / "python" / "sglang" / "srt" / "mem_cache"
    (mem_cache / "hybrid_cache").mkdir(parents=True)
    (root / "python" / "sglang" / "__init__.py").write_text("")
    (mem_cache / "hiradix_cache.py").write_text(hiradix.replace("{assembler}", assembler))
    (mem_cache / "memory_pool.py").write_text(NSA_MEMORY_POOL.replace("{pool}", pool))
    (mem_cache / "memory_pool_host.py").write_text(NSA_HOST)
    (mem_cache / "hybrid_cache" / "hybrid_pool_assembler.py").write_text(f"def {assembler}(radix_cache, params, server_args, *, extra_config):\n    pass\n")
    return root


@pytest.mark.parametrize("assembler", ["attach_hybrid_nsa_pool_to_hiradix_cache", "build_nsa_hybrid_stack"])
def test_a_tree_spelled_before_the_rename_runs_the_dsa_build_at_the_page_size_its_nsa_pool_asserts(tmp_path, assembler):
    tree = locate(f"{nsa_tree(tmp_path, assembler=assembler)}@abc")
    assert tree.layouts == ("HiRadixCache", "HiRadixCache+dsa"), tree.unwired
    (dsa,) = [a for a in adapters_for(tree) if a.layout_key == "HiRadixCache+dsa"]
    assert dsa.name == "sglang-live:HiRadixCache+dsa@abc", "the same row as after the rename: a sweep compares it across"
    (why,) = dsa.page_size_evidence
    assert dsa.page_size == 64 and "memory_pool.py:15: " in why and "`assert self.page_size == 64`" in why, why


def test_a_pool_class_of_neither_spelling_is_named_as_the_mark_missing(tmp_path):
    tree = locate(str(nsa_tree(tmp_path, pool="SparseTokenToKVPool")))
    assert tree.layouts == ("HiRadixCache",)
    assert any("sglang/srt/mem_cache/memory_pool.py has no DSATokenToKVPool (NSATokenToKVPool before the rename)" in line
               for line in tree.unwired), tree.unwired


def test_a_hit_drain_tree_runs_the_hit_drain_dsa_build_as_the_same_row(tmp_path):
    tree = locate(f"{nsa_tree(tmp_path, hiradix=DRAIN_HIRADIX)}@0.5.18")
    dsa = [a for a in adapters_for(tree) if a.name == "sglang-live:HiRadixCache+dsa@0.5.18"]
    assert [a.layout_key for a in dsa] == ["HiRadixCache+dsa/hit-drain"], tree.layouts
    assert dsa[0].page_size == 64
    assert "HiRadixCache+dsa/drain" not in tree.layouts, "without progress ACKs it is not the 0.5.19/0.5.20 build"


def memory_pool_module(*names: str) -> types.ModuleType:
    module = types.ModuleType("sglang.srt.mem_cache.memory_pool")
    for name in names:
        setattr(module, name, type(name, (), {"quant_block_size": 128, "rope_storage_dtype": torch.bfloat16}))
    return module


def test_the_device_pool_is_the_class_the_tree_defines_under_either_name():
    assert dsa_pool_class(memory_pool_module("MLATokenToKVPool", "NSATokenToKVPool")).__name__ == "NSATokenToKVPool"
    assert dsa_pool_class(memory_pool_module("DSATokenToKVPool")).__name__ == "DSATokenToKVPool"
    with pytest.raises(LiveBuildError, match=r"^sglang\.srt\.mem_cache\.memory_pool defines none of DSATokenToKVPool, NSATokenToKVPool"):
        dsa_pool_class(memory_pool_module("MLATokenToKVPool"))


def test_the_fp8_latent_row_is_wider_than_the_models_dimensions_as_the_model_runner_sizes_it():
    pool_class = dsa_pool_class(memory_pool_module("NSATokenToKVPool"))
    assert fp8_latent_width(pool_class) == 128 + 4 + 8 * 2, "the latent's bytes, one fp32 scale per 128, the rope in bf16"
    pool_class.quant_block_size = 64
    assert fp8_latent_width(pool_class) == 128 + 8 + 16, "the block the tree's class declares"


def test_the_indexer_host_pool_is_found_in_the_group_as_the_tree_keeps_it():
    indexer = object()
    older = SimpleNamespace(entry_map={"indexer": SimpleNamespace(host_pool=indexer)})  # a group before get_pool
    newer = SimpleNamespace(get_pool={"indexer": indexer}.__getitem__)
    assert pool_of(older, "indexer") is indexer and pool_of(newer, "indexer") is indexer


class SharedIndexHostPool:
    """An upstream-shaped host pool whose slots are the KV pool's: its own free list starts whole and nothing allocates from it."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.free_slots = torch.arange(size, dtype=torch.int64)

    def available_size(self) -> int:
        return len(self.free_slots)

    def free(self, indices: torch.Tensor) -> int:
        self.free_slots = torch.cat([self.free_slots, indices])
        return len(indices)


def test_a_free_of_kv_slots_mirrored_into_the_indexers_own_allocator_does_not_add_up():
    pool = SharedIndexHostPool(8)
    assert own_allocator_accounting(pool) == (0, 8, 8), "untouched: every slot free once"
    pool.free(torch.tensor([2, 3]))  # KV's slots, freed a second time here
    allocated, free, capacity = own_allocator_accounting(pool)
    assert (allocated, free, capacity) == (0, 10, 8) and allocated + free != capacity


def test_frees_kept_aside_count_and_a_pool_without_a_free_list_is_read_from_its_size():
    pool = SharedIndexHostPool(8)
    pool.free_slots, pool.release_slots = torch.arange(4, 8), [torch.tensor([0, 1])]
    pool.available_size = lambda: 6  # type: ignore[method-assign]
    assert own_allocator_accounting(pool) == (2, 6, 8), "slots 2 and 3 allocated; 0 and 1 freed and kept aside"
    bare = SimpleNamespace(size=8, available_size=lambda: 5)
    assert own_allocator_accounting(bare) == (3, 5, 8)
