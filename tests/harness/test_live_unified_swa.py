"""0.5.2x's UnifiedRadixCache with its sliding-window component, on hand-written upstream-shaped trees and objects (no
upstream code): which trees run the build and under which row; the window a match serves, read through the
allocator's full-to-window mapping as attention reads it; the window's host slots a prefetch's commit attaches to the
tree, read at the tree core's commit (no Python node needed, as the Rust tree core has none)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from conformance.live.adapter import adapters_for
from conformance.live.layouts.unified_swa.sidecar import UnifiedSwaSidecar, released_host_slots
from conformance.live.taps import Taps
from conformance.live.tiers import LAYERS, MhaRows
from conformance.live.tree import locate
from spec.clock import ManualClock
from spec.config import TerminationConfig
from spec.fence import HitPolicy
from spec.trace import HOST, EventKind, TraceRecorder

SLOTS, HEAD_DIM, PAGE = 32, 4, 4
SWA, FULL, PREFETCH, LOAD_BACK = "swa-component", "full-component", "prefetch-phase", "load-back-phase"
MODULES = {"components": SimpleNamespace(ComponentType=SimpleNamespace(SWA=SWA),
                                         CacheTransferPhase=SimpleNamespace(PREFETCH=PREFETCH))}

# --- which trees run the build ---------------------------------------------------------------------------------------

UNIFIED = "class UnifiedRadixCache(BasePrefixCache):\n    pass\n"
CONTROLLER = "class HybridCacheController(HiCacheController):\n    def allocate_storage_hit(self, operation, hit_tokens):\n        pass\n"
INLINE = "\n    def _drain(self):\n        def _try_alloc_storage_hit(operation):\n            pass\n"
ASSEMBLER = "class _SwaStrategy(StackStrategy):\n    pass\n"


def unified_tree(root: Path, *, drain: str = "allocate_storage_hit", swa: bool = True) -> Path:
    mem_cache = root / "sglang" / "srt" / "mem_cache"
    for folder in ("unified_cache", "hybrid_cache"):
        (mem_cache / folder).mkdir(parents=True)
    (root / "sglang" / "__init__.py").write_text("")
    (root / "sglang" / "srt" / "runtime_context.py").write_text("def publish(server_args, *, role):\n    pass\n")
    (mem_cache / "unified_cache" / "unified_tree_core.py").write_text("class UnifiedTreeCore:\n    pass\n")
    (mem_cache / "unified_radix_cache.py").write_text(UNIFIED + (INLINE if drain == "inline" else ""))
    controller = CONTROLLER if drain == "allocate_storage_hit" else CONTROLLER.replace("allocate_storage_hit", "allocate")
    (mem_cache / "hybrid_cache" / "hybrid_cache_controller.py").write_text(controller)
    (mem_cache / "hybrid_cache" / "hybrid_pool_assembler.py").write_text(ASSEMBLER if swa else "")
    return root


@pytest.mark.parametrize("drain, key", [("allocate_storage_hit", "UnifiedRadixCache+swa"), ("inline", "UnifiedRadixCache+swa/inline")],
                         ids=["0.5.22+ drain", "0.5.20/0.5.21 drain"])
def test_a_unified_tree_with_the_swa_strategy_runs_the_sliding_window_build_under_one_row(tmp_path, drain, key):
    tree = locate(f"{unified_tree(tmp_path, drain=drain)}@0.5.2x")
    assert key in tree.layouts
    assert not {"UnifiedRadixCache+swa", "UnifiedRadixCache+swa/inline"} - {key} & set(tree.layouts), "the two drains exclude each other"
    (swa,) = [a for a in adapters_for(tree) if a.layout_key == key]
    assert swa.name == "sglang-live:UnifiedRadixCache+swa@0.5.2x", "one row for both drains, as on every target of a sweep"
    assert "pool:swa" in swa.capabilities, "every window test (F10 and the rest) must run on it"
    assert swa.default_extra_pools == ("swa",)


def test_a_unified_tree_without_the_swa_strategy_names_the_build_not_run_with_the_mark_missing(tmp_path):
    tree = locate(str(unified_tree(tmp_path, swa=False)))
    assert "UnifiedRadixCache" in tree.layouts, "the full-attention build still runs"
    assert not {"UnifiedRadixCache+swa", "UnifiedRadixCache+swa/inline"} & set(tree.layouts)
    (line,) = [line for line in tree.unwired if line.startswith("UnifiedRadixCache+swa (UnifiedRadixCache)")]
    assert "the 0.5.22+ sliding-window build" in line and "SWA strategy in the unified assembler" in line, line


# --- the window a match serves ---------------------------------------------------------------------------------------


def window_pool() -> SimpleNamespace:
    """An MHA pool's buffers as upstream keeps them: k and v per layer, [slots, heads, head size]."""
    return SimpleNamespace(k_buffer=[torch.zeros(SLOTS, 1, HEAD_DIM) for _ in range(LAYERS)],
                           v_buffer=[torch.zeros(SLOTS, 1, HEAD_DIM) for _ in range(LAYERS)])


class TreeCore:
    """A tree core's commit as the unified cache calls it: it releases what `releases` names, as FreeComponentHostSlot
    actions (the Rust core's are built from its tagged tuples; the Python core's components append them)."""

    def __init__(self, releases: list[torch.Tensor], component=SWA) -> None:
        self.releases, self.component = releases, component

    def commit_hicache_transfers(self, node_id, phase, comp_xfers, *, cache_actions, insert_result=None, pool_storage_result=None):
        cache_actions.extend(SimpleNamespace(component_type=self.component, host_indices=[r]) for r in self.releases)


def sidecar(window: int, mapping: torch.Tensor | None = None, tree_core: TreeCore | None = None) -> UnifiedSwaSidecar:
    full_to_swa = mapping if mapping is not None else torch.arange(SLOTS)
    cache = SimpleNamespace(
        components={SWA: SimpleNamespace(_swa_kv_pool_host=SimpleNamespace(alloc=lambda n: None, free=lambda s: None))},
        token_to_kv_pool_allocator=SimpleNamespace(translate_loc_from_full_to_swa=lambda full: full_to_swa[full]),
        tree_core=tree_core or TreeCore([]))
    swa = UnifiedSwaSidecar(cache, MhaRows(window_pool(), torch.float32, HEAD_DIM), window, MODULES)
    swa.rows.write(torch.arange(SLOTS), torch.arange(SLOTS * 2 * LAYERS * HEAD_DIM, dtype=torch.float32).reshape(SLOTS, 2, LAYERS, 1, HEAD_DIM))
    return swa


def rows_at(swa: UnifiedSwaSidecar, slots: list[int]) -> torch.Tensor:
    return swa.rows.read(torch.tensor(slots))


def test_the_pool_is_a_trailing_window_of_the_configured_length():
    swa = sidecar(8)
    assert swa.layout.name == "swa" and swa.layout.hit_policy is HitPolicy.TRAILING_WINDOW and swa.layout.window_tokens == 8


def test_a_match_serves_the_window_rows_its_last_full_slots_map_to():
    mapping = torch.arange(SLOTS).flip(0)  # full slot i -> window slot 31 - i: the window need not follow the full order
    served = sidecar(8, mapping).loaded(SimpleNamespace(), torch.arange(4, 20))
    assert torch.equal(served, rows_at(sidecar(8, mapping), [31 - i for i in range(12, 20)]))


def test_a_match_shorter_than_the_window_serves_all_of_it():
    swa = sidecar(8)
    assert torch.equal(swa.loaded(SimpleNamespace(), torch.tensor([4, 5, 6, 7])), rows_at(swa, [4, 5, 6, 7]))


def test_a_window_slot_the_allocator_no_longer_maps_serves_no_window():
    mapping = torch.arange(SLOTS)
    mapping[13] = 0  # clear_full_to_swa_mapping: the tree dropped that token's window rows
    assert sidecar(8, mapping).loaded(SimpleNamespace(), torch.arange(4, 20)) is None, "F10 then names the match"


def test_an_unmapped_slot_before_the_window_does_not_matter():
    mapping = torch.arange(SLOTS)
    mapping[4:12] = 0
    swa = sidecar(8, mapping)
    assert torch.equal(swa.loaded(SimpleNamespace(), torch.arange(4, 20)), rows_at(swa, list(range(12, 20))))


def test_no_match_serves_nothing():
    assert sidecar(8).loaded(SimpleNamespace(), torch.arange(0)) is None


def test_a_request_s_window_rows_land_at_the_window_slots_its_full_slots_map_to():
    swa = sidecar(8, torch.arange(SLOTS).flip(0))
    data = torch.randn(4, 2, LAYERS, 1, HEAD_DIM)
    swa.stage(torch.tensor([0, 1, 2, 3]), {"swa": data, "kv": torch.zeros(4)})
    assert torch.equal(rows_at(swa, [31, 30, 29, 28]), data)


# --- what a prefetch's commit attaches --------------------------------------------------------------------------------


def committed(releases: list[torch.Tensor], phase: str = PREFETCH, component=SWA, unstaged: bool = False) -> list:
    """The INSERT events of one commit of a window staged at host slots 16..23 (none where `unstaged`), of which
    `releases` are freed."""
    trace = TraceRecorder(ManualClock(0.0))
    taps = Taps(trace, TerminationConfig(page_size=PAGE), PAGE)
    tree_core = TreeCore(releases, component)
    swa = sidecar(8, tree_core=tree_core)
    swa.tap(taps)
    window = SimpleNamespace(host_indices=None if unstaged else torch.arange(16, 24))
    actions: list = []
    with taps.scheduling(op="r1", phase="commit"):
        swa.cache.tree_core.commit_hicache_transfers("node", phase, {SWA: [window]}, cache_actions=actions)
    assert len(actions) == len(releases), "the tap hands upstream's actions on untouched"
    return [e for e in trace.events() if e.kind is EventKind.INSERT]


def test_a_commit_attaches_the_window_s_host_slots_it_does_not_release():
    (insert,) = committed([torch.arange(16, 20)])
    assert (insert.op, insert.pool, insert.space, insert.slots) == ("r1", "swa", HOST, (20, 21, 22, 23))


def test_a_commit_attaching_the_whole_window_inserts_every_slot():
    (insert,) = committed([])
    assert insert.slots == tuple(range(16, 24))


def test_a_commit_releasing_the_window_inserts_nothing():
    assert committed([torch.arange(16, 24)]) == [], "all-or-nothing: a window dropped whole enters no tree"


def test_another_component_s_release_is_not_the_window_s():
    (insert,) = committed([torch.arange(16, 24)], component=FULL)
    assert insert.slots == tuple(range(16, 24))


def test_a_commit_of_another_phase_inserts_nothing():
    assert committed([], phase=LOAD_BACK) == [], "a load-back's window slots are the device's, not the tree's host slots"


def test_a_prefetch_without_a_staged_window_inserts_nothing():
    assert committed([], unstaged=True) == []


def test_released_slots_are_read_from_free_component_host_slot_actions_only():
    actions = [SimpleNamespace(component_type=SWA, host_indices=[torch.tensor([1, 2]), torch.tensor([5])]),
               SimpleNamespace(component_type=SWA, indices=[torch.tensor([7])]),  # a device free: not a host slot
               SimpleNamespace(full_indices=[torch.tensor([9])])]
    assert released_host_slots(actions, SWA) == {1, 2, 5}
