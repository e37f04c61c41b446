"""Layout declarations and the DSA build's tier, on hand-written upstream-shaped trees and buffers (no upstream code).

A layout runs where its class is defined and every mark of its build is in
the tree; otherwise the header names the first mark missing. The DSA
build's page size and its rank-replicated backups are read from the tree's
lines, and its latent and indexer rows land where upstream's buffers keep
them.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from conformance.live.adapter import adapters_for
from conformance.live.layouts.hiradix_dsa.tier import IndexerRows, LatentRows
from conformance.live.tree import locate

HIRADIX = """
class HiRadixCache(RadixCache):
    def __init__(self, params, server_args):
        self.kv_cache = params.token_to_kv_pool_allocator.get_kvcache()
        if isinstance(self.kv_cache, DSATokenToKVPool):
            attach_hybrid_dsa_pool_to_hiradix_cache(self, params, server_args)
"""
MEMORY_POOL = """
class MLATokenToKVPool(KVCache):
    def __init__(self, size, page_size):
        assert page_size > 0


class DSATokenToKVPool(MLATokenToKVPool):
    def __init__(self, size, page_size, index_head_dim):
        super().__init__(size, page_size)
        assert index_head_dim == 128
        if _is_hip:
            assert self.page_size == 1
        else:
            assert self.page_size == {page}
"""
ASSEMBLER = "def attach_hybrid_dsa_pool_to_hiradix_cache(radix_cache, params, server_args):\n    pass\n"
HOST = "class DSAIndexerPoolHost(HostKVCache):\n    pass\n"
CONTROLLER = """
class HiCacheController:
    def __init__(self):
        # for MLA models, only one rank needs to backup the KV cache
        self.backup_skip = (
            self.storage_config.is_mla_model
            and self.storage_config.tp_rank != 0
        )
"""


def dsa_tree(root: Path, *, page: int = 64, assembler: bool = True, controller: bool = True) -> Path:
    mem_cache = root / "python" / "sglang" / "srt" / "mem_cache"
    (mem_cache / "hybrid_cache").mkdir(parents=True)
    (root / "python" / "sglang" / "__init__.py").write_text("")
    (mem_cache / "hiradix_cache.py").write_text(HIRADIX)
    (mem_cache / "memory_pool.py").write_text(MEMORY_POOL.format(page=page))
    (mem_cache / "memory_pool_host.py").write_text(HOST)
    if assembler:
        (mem_cache / "hybrid_cache" / "hybrid_pool_assembler.py").write_text(ASSEMBLER)
    if controller:
        managers = root / "python" / "sglang" / "srt" / "managers"
        managers.mkdir(parents=True)
        (managers / "cache_controller.py").write_text(CONTROLLER)
    return root


def test_a_tree_with_the_dsa_build_runs_it_beside_the_mha_build_at_the_page_size_its_pool_asserts(tmp_path):
    tree = locate(f"{dsa_tree(tmp_path)}@abc")
    assert tree.layouts == ("HiRadixCache", "HiRadixCache+dsa")
    by_name = {a.name: a for a in adapters_for(tree)}
    dsa, mha = by_name["sglang-live:HiRadixCache+dsa@abc"], by_name["sglang-live:HiRadixCache@abc"]
    assert (dsa.page_size, mha.page_size) == (64, None)
    (why,) = dsa.page_size_evidence
    assert why.startswith("python/sglang/srt/mem_cache/memory_pool.py:14: ") and "`assert self.page_size == 64`" in why, why
    assert "pool:indexer" in dsa.capabilities and dsa.default_extra_pools == ("indexer",) and "pool:indexer" not in mha.capabilities


def test_the_page_size_is_the_one_the_tree_asserts_not_a_number_of_ours(tmp_path):
    (dsa,) = [a for a in adapters_for(locate(str(dsa_tree(tmp_path, page=32)))) if a.layout_key == "HiRadixCache+dsa"]
    assert dsa.page_size == 32


def test_the_dsa_build_declares_its_backups_rank_replicated_where_only_rank_0_writes(tmp_path):
    (dsa,) = [a for a in adapters_for(locate(str(dsa_tree(tmp_path)))) if a.layout_key == "HiRadixCache+dsa"]
    produced, (why,) = dsa.deployment["rank_local_backups"]
    assert produced is False and "cache_controller.py:7:" in why and "tp_rank != 0" in why, why
    (elsewhere,) = [a for a in adapters_for(locate(str(dsa_tree(tmp_path / "other", controller=False)))) if a.layout_key == "HiRadixCache+dsa"]
    assert "rank_local_backups" not in elsewhere.deployment, "no line says so: the scenario is judged"


def test_a_hiradix_without_the_dsa_assembler_runs_the_mha_build_and_names_the_dsa_build_not_run(tmp_path):
    tree = locate(str(dsa_tree(tmp_path, assembler=False)))
    assert tree.layouts == ("HiRadixCache",)
    assert ("HiRadixCache+dsa (HiRadixCache) is in the tree but not in the fork's DSA build the harness is wired to "
            "(sglang/srt/mem_cache/hybrid_cache/hybrid_pool_assembler.py does not exist)") in tree.unwired


def dsa_pool(page_size: int = 4, pages: int = 3) -> SimpleNamespace:
    per_token = 128 + 128 // 128 * 4
    return SimpleNamespace(page_size=page_size, index_head_dim=128, quant_block_size=128, kv_cache_dim=24, store_dtype=torch.bfloat16,
                           index_k_with_scale_buffer=[torch.zeros(pages, page_size * per_token, dtype=torch.uint8) for _ in range(2)],
                           kv_buffer=[torch.zeros(pages * page_size, 1, 24, dtype=torch.bfloat16) for _ in range(2)])


def test_an_index_row_is_its_key_bytes_in_the_pages_key_block_and_its_scale_bytes_in_the_scale_block():
    pool, ps = dsa_pool(), 4
    rows = IndexerRows(pool)
    assert rows.layout.elem_shape == (2, 132) and rows.layout.dtype == torch.uint8 and rows.layout.rank_replicated
    slot = torch.tensor([6])  # page 1, the third token of it
    row = torch.randint(0, 256, (1, 2, 132), dtype=torch.uint8)
    rows.write(slot, row)
    for layer in range(2):
        page = pool.index_k_with_scale_buffer[layer][1]
        assert torch.equal(page[2 * 128 : 3 * 128], row[0, layer, :128]), "the key bytes: token 2's 128 of the page's fp8 block"
        assert torch.equal(page[ps * 128 + 2 * 4 : ps * 128 + 3 * 4], row[0, layer, 128:]), "the scale bytes: token 2's 4 after every key"
        assert int(page.count_nonzero()) <= 132 and not pool.index_k_with_scale_buffer[layer][0].any(), "no other token touched"
    assert torch.equal(rows.read(slot), row)


@pytest.mark.parametrize("slots", [[0, 1, 2, 3], [5, 11, 4]])
def test_index_and_latent_rows_read_back_what_was_written(slots):
    pool = dsa_pool()
    at = torch.tensor(slots)
    index = torch.randint(0, 256, (len(slots), 2, 132), dtype=torch.uint8)
    latent = torch.randn(len(slots), 2, 24).to(torch.bfloat16)
    IndexerRows(pool).write(at, index)
    LatentRows(pool).write(at, latent)
    assert torch.equal(IndexerRows(pool).read(at), index) and torch.equal(LatentRows(pool).read(at), latent)
    assert LatentRows(pool).layout.elem_shape == (2, 24) and LatentRows(pool).layout.rank_replicated


DRAIN_HIRADIX = """
class HiRadixCache(RadixCache):
    def _drain_storage_control_queues_impl(self, n_storage_hit, n_ack_prefetch, n_backup, n_release, log_metrics):
        def _drain_and_alloc_storage_hit():
            pass

        for ack in _drain_queue(cc.ack_prefetch_queue, n_ack_prefetch):
            pass

    def can_terminate_prefetch(self, operation):
        if self.prefetch_stop_policy == "best_effort":
            return True
        if self.prefetch_stop_policy == "wait_complete":
            return False
        return self.is_prefetch_timeout(operation)

    def check_prefetch_progress(self, handle):
        should_terminate_tensor = torch.tensor(int(should_terminate), dtype=torch.int, device="cpu")
        self._all_reduce(should_terminate_tensor, torch.distributed.ReduceOp.MAX)
"""
DRAIN_CONTROLLER = """
class HiCacheController:
    def _reduce_prefetch_ack(self, ack):
        self._all_reduce(completed_tokens_tensor, torch.distributed.ReduceOp.MIN, self.prefetch_completion_sync_groups)
"""


def drain_tree(root: Path) -> Path:
    package = root / "sglang"
    (package / "srt" / "mem_cache").mkdir(parents=True)
    (package / "srt" / "managers").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "srt" / "mem_cache" / "hiradix_cache.py").write_text(DRAIN_HIRADIX)
    (package / "srt" / "managers" / "cache_controller.py").write_text(DRAIN_CONTROLLER)
    (package / "srt" / "runtime_context.py").write_text("def publish(server_args, *, role, hf_config=None):\n    pass\n")
    return root


def test_a_hiradix_with_the_ack_drain_runs_the_drain_layout_under_the_same_row_and_its_own_profile(tmp_path):
    tree = locate(f"{drain_tree(tmp_path)}@0.5.20")
    assert tree.layouts == ("HiRadixCache/drain",)
    # The row runs in its drain build: the fork's build of the same row is not a blind spot to report.
    assert not any(line.startswith("HiRadixCache is in the tree") for line in tree.unwired), tree.unwired
    (adapter,) = adapters_for(tree)
    assert adapter.name == "sglang-live:HiRadixCache@0.5.20", "one row per class and build on every target of a sweep"
    assert adapter.profile == "drain_vote"
    assert any("never yes under wait_complete" in line for line in adapter.profile_evidence)
    assert any("MAX-reduces [terminated or vote]" in line for line in adapter.profile_evidence)


def test_without_its_max_reduce_the_class_declares_no_drain_vote(tmp_path):
    drain_tree(tmp_path)
    path = tmp_path / "sglang" / "srt" / "mem_cache" / "hiradix_cache.py"
    path.write_text(DRAIN_HIRADIX.replace("torch.distributed.ReduceOp.MAX", "op"))
    (adapter,) = adapters_for(locate(str(tmp_path)))
    assert adapter.profile is None, "no line shows the agreement: the spec's defaults judge it"


STORAGE_WRITER = """
class HiCacheStorageConfig:
    @property
    def is_storage_writer(self) -> bool:
        return not self.is_mla_model or self.tp_rank == self.dcp_rank
"""
PER_BATCH_CONTROLLER = """
class HiCacheController:
    def _page_transfer(self, operation):
        for i in range(0, len(operation.hash_value), STORAGE_BATCH_SIZE):
            hit_pages = self._page_transfer_kv_batch(operation, batch_hashes, batch_host_indices, extra_info, kv_derived)

    def _page_transfer_kv_batch(self, operation, batch_hashes, batch_host_indices, extra_info, kv_derived_transfers):
        kv_hits = self.page_get_func(operation, batch_hashes, batch_host_indices, extra_info)
        sidecar_results = self.storage_backend.batch_get_v2(kv_derived_transfers, extra_info=extra_info)
"""


def test_the_writer_rule_of_the_unified_line_also_declares_the_backups_rank_replicated(tmp_path):
    dsa_tree(tmp_path, controller=False)
    (tmp_path / "python" / "sglang" / "srt" / "mem_cache" / "hicache_storage.py").write_text(STORAGE_WRITER)
    (dsa,) = [a for a in adapters_for(locate(str(tmp_path))) if a.layout_key == "HiRadixCache+dsa"]
    produced, (why,) = dsa.deployment["rank_local_backups"]
    assert produced is False and "hicache_storage.py:5:" in why and "tp_rank == self.dcp_rank" in why, why


@pytest.mark.parametrize("layout_key", ["HiRadixCache+dsa/drain", "UnifiedRadixCache+dsa"])
def test_a_build_that_reads_the_sidecars_beside_each_kv_batch_declares_that_io_order(tmp_path, layout_key):
    from conformance.live import evidence
    from conformance.live.layouts import BY_KEY
    from conformance.scenarios.schedule_model import EXTRAS_WITH_EACH_BATCH

    dsa_tree(tmp_path, controller=False)
    managers = tmp_path / "python" / "sglang" / "srt" / "managers"
    managers.mkdir(parents=True)
    (managers / "cache_controller.py").write_text(PER_BATCH_CONTROLLER)
    tree = locate(str(tmp_path))
    order, (why,) = evidence.io_order_of(tree, BY_KEY[layout_key])
    assert order == EXTRAS_WITH_EACH_BATCH and "cache_controller.py:7:" in why, why
    (managers / "cache_controller.py").write_text(PER_BATCH_CONTROLLER.replace("_page_transfer_kv_batch", "_page_get_one_batch"))
    assert evidence.io_order_of(locate(str(tmp_path)), BY_KEY[layout_key]) == (None, ()), "no such line: the default order"
    (fork,) = [a for a in adapters_for(tree) if a.layout_key == "HiRadixCache+dsa"]
    assert fork.io_order == "kv_then_extras", "the fork's build loads the indexer after all of KV"


def test_a_hiradix_whose_drain_allocates_the_hit_without_progress_acks_runs_the_hit_drain_layout_as_the_same_row(tmp_path):
    drain_tree(tmp_path)
    hiradix = tmp_path / "sglang" / "srt" / "mem_cache" / "hiradix_cache.py"
    hiradix.write_text(DRAIN_HIRADIX.replace("for ack in _drain_queue(cc.ack_prefetch_queue, n_ack_prefetch):", "for _ in ():"))
    tree = locate(f"{tmp_path}@0.5.18")
    assert tree.layouts == ("HiRadixCache/hit-drain",)
    (adapter,) = adapters_for(tree)
    assert adapter.name == "sglang-live:HiRadixCache@0.5.18", "the same row as the fork's and the ACK drain's"
    assert "HiRadixCache/drain" not in tree.layouts


def test_a_controller_copying_on_threads_of_its_own_refuses_the_forks_layout_in_one_line(tmp_path):
    package = tmp_path / "sglang"
    (package / "srt" / "mem_cache").mkdir(parents=True)
    (package / "srt" / "managers").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "srt" / "mem_cache" / "hiradix_cache.py").write_text("class HiRadixCache(RadixCache):\n    pass\n")
    controller = package / "srt" / "managers" / "cache_controller.py"
    controller.write_text("class HiCacheController:\n    def write_thread_func_direct(self):\n        pass\n")
    tree = locate(str(tmp_path))
    assert tree.layouts == ()
    assert any(line.startswith("HiRadixCache is in the tree but not in the fork's layout") and "write/load threads of its own" in line
               for line in tree.unwired), tree.unwired
    controller.write_text("class HiCacheController:\n    def start_writing(self):\n        pass\n")
    assert locate(str(tmp_path)).layouts == ("HiRadixCache",)


def test_a_mamba_host_pool_asserting_a_list_of_page_first_layouts_runs_the_direct_backends_one(tmp_path):
    from conformance.live.evidence import host_layout_of
    from conformance.live.layouts import BY_KEY

    package = tmp_path / "sglang"
    (package / "srt" / "mem_cache").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "srt" / "mem_cache" / "memory_pool_host.py").write_text(
        "class MambaPoolHost(HostKVCache):\n    def __init__(self, device_pool, layout='layer_first'):\n"
        "        assert layout in [\n            \"page_first\",\n            \"page_first_direct\",\n        ], layout\n")
    layout, why = host_layout_of(locate(str(tmp_path)), BY_KEY["HiMambaRadixCache"])
    assert layout == "page_first_direct"
    assert why[0].startswith("sglang/srt/mem_cache/memory_pool_host.py:5: MambaPoolHost refuses every other host memory layout")
