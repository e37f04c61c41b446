"""Shared by the tests of hostile use: the three caches built one way, and oracles that trust none of them.

`make_any(name, **config fields)` builds hiradix, unified_radix or
hi_mamba_radix with small pools over a file backend in tmp_path; at teardown
every cache is closed, no thread may be left and no background thread may
have failed. The `oracle` fixture gives the bytes a request must carry (a
function of each page's chained hash, so requests sharing a prefix agree on
it) and the slots every holder of a cache holds, counted without its
allocators (tests/caches/oracles.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from caches.registry import build
from spec.clock import ManualClock

# Test modules here import the oracles module directly (tests are not a package).
sys.path.insert(0, str(Path(__file__).parent))
from oracles import Oracle  # noqa: E402

POOLS = {"hiradix": ("indexer",), "unified_radix": ("indexer", "mamba"), "hi_mamba_radix": ("mamba",)}
WAIT_S = 20.0


def settings(name: str, storage_path, **fields) -> dict:
    out = dict(
        page_size=4, device_pages=16, host_pages=16, state_device_slots=8, state_host_slots=16,
        kv_elem_shape=(2, 3), indexer_elem_shape=(5,), state_elem_shape=(6,), extra_pools=POOLS[name],
        prefetch_policy="wait_complete", storage_path=str(storage_path), storage_batch_pages=2, wait_timeout_s=WAIT_S,
    )
    out.update(fields)
    return out


@pytest.fixture
def config_for():
    """config_for(name, storage_path, **fields): the settings make_any builds with."""
    return settings


@pytest.fixture
def make_any(tmp_path):
    built = []

    def make(name: str, *, trace=None, clock=None, storage=None, **fields):
        config = settings(name, tmp_path / "storage", **fields)
        cache = build(name, config, trace=trace, clock=clock or ManualClock(1000.0), storage=storage)
        built.append(cache)
        return cache

    yield make
    for cache in built:
        cache.close()
    alive = [t.name for cache in built for t in cache.threads() if t.is_alive()]
    assert not alive, f"threads still running after close(): {alive}"
    failed = [e for cache in built for e in cache.background_errors()]
    assert not failed, f"background threads failed: {failed}"


@pytest.fixture
def oracle() -> type[Oracle]:
    return Oracle
