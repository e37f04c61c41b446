"""The sliding-window sidecar on hand-written upstream-shaped objects (no upstream code): what a match served is the
SWA values on the matched path over the window before its end, and a path with a tombstone inside the window served
no window (the oracle then names F10)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from conformance.live.layouts.unified_fork_swa.sidecar import SwaSidecar
from conformance.live.tiers import LAYERS, MhaRows
from spec.fence import HitPolicy

SLOTS, HEAD_DIM = 32, 4
MODULES = {"tree_component": SimpleNamespace(ComponentType=SimpleNamespace(SWA="swa-component"))}


def window_pool() -> SimpleNamespace:
    """An MHA pool's buffers as upstream keeps them: k and v per layer, [slots, heads, head size]."""
    return SimpleNamespace(k_buffer=[torch.zeros(SLOTS, 1, HEAD_DIM) for _ in range(LAYERS)],
                           v_buffer=[torch.zeros(SLOTS, 1, HEAD_DIM) for _ in range(LAYERS)])


def node(parent, swa_slots):
    return SimpleNamespace(parent=parent, component_data={"swa-component": SimpleNamespace(value=swa_slots)})


def sidecar(window: int, full_to_swa: torch.Tensor | None = None) -> tuple[SwaSidecar, SimpleNamespace]:
    root = SimpleNamespace(parent=None, component_data={})
    mapping = full_to_swa if full_to_swa is not None else torch.arange(SLOTS)
    cache = SimpleNamespace(
        root_node=root,
        components={"swa-component": SimpleNamespace(_swa_kv_pool_host=object())},
        token_to_kv_pool_allocator=SimpleNamespace(translate_loc_from_full_to_swa=lambda full: mapping[full]))
    return SwaSidecar(cache, MhaRows(window_pool(), torch.float32, HEAD_DIM), window, MODULES), root


def rows_at(swa: SwaSidecar, slots: list[int]) -> torch.Tensor:
    return swa.rows.read(torch.tensor(slots))


def fill(swa: SwaSidecar) -> None:
    """Every window slot's rows: distinct values, so a wrong slot shows."""
    swa.rows.write(torch.arange(SLOTS), torch.arange(SLOTS * 2 * LAYERS * HEAD_DIM, dtype=torch.float32).reshape(SLOTS, 2, LAYERS, 1, HEAD_DIM))


def test_the_pool_is_a_trailing_window_of_the_configured_length():
    swa, _ = sidecar(8)
    assert swa.layout.name == "swa" and swa.layout.hit_policy is HitPolicy.TRAILING_WINDOW and swa.layout.window_tokens == 8
    assert swa.layout.unit == "token"


@pytest.mark.parametrize("window, want", [(8, list(range(24, 32))), (12, [12, 13, 14, 15] + list(range(24, 32)))],
                         ids=["one-node", "straddles-two-nodes"])
def test_a_match_serves_the_window_before_its_end_read_off_the_path(window, want):
    swa, root = sidecar(window)
    fill(swa)
    first = node(root, torch.arange(8, 16))
    last = node(first, torch.arange(24, 32))  # window slots need not follow the full slots' order
    served = swa.loaded(SimpleNamespace(last_device_node=last), torch.arange(16))
    assert torch.equal(served, rows_at(swa, want))


def test_a_tombstone_inside_the_window_serves_no_window():
    swa, root = sidecar(12)
    fill(swa)
    first = node(root, None)  # the tree dropped its window rows
    last = node(first, torch.arange(24, 32))
    assert swa.loaded(SimpleNamespace(last_device_node=last), torch.arange(16)) is None


def test_a_tombstone_before_the_window_does_not_matter():
    swa, root = sidecar(8)
    fill(swa)
    last = node(node(root, None), torch.arange(24, 32))
    assert torch.equal(swa.loaded(SimpleNamespace(last_device_node=last), torch.arange(16)), rows_at(swa, list(range(24, 32))))


def test_a_match_shorter_than_the_window_serves_all_of_it():
    swa, root = sidecar(8)
    fill(swa)
    last = node(root, torch.arange(4, 8))
    assert torch.equal(swa.loaded(SimpleNamespace(last_device_node=last), torch.arange(4)), rows_at(swa, [4, 5, 6, 7]))


def test_no_match_serves_nothing():
    swa, root = sidecar(8)
    assert swa.loaded(SimpleNamespace(last_device_node=root), torch.arange(0)) is None


def test_a_request_s_window_rows_land_at_the_window_slots_its_full_slots_map_to():
    mapping = torch.arange(SLOTS).flip(0)  # full slot i -> window slot 31 - i
    swa, _ = sidecar(8, mapping)
    data = torch.randn(4, 2, LAYERS, 1, HEAD_DIM)
    swa.stage(torch.tensor([0, 1, 2, 3]), {"swa": data, "kv": torch.zeros(4)})
    assert torch.equal(rows_at(swa, [31, 30, 29, 28]), data)
    assert not rows_at(swa, [0, 1, 2, 3]).any(), "the full slots' own window rows were written"
