"""What every test of this project shares: the one cache factory.

`cache_factory` builds the caches a test uses (by registry name with small
pools over a file backend in tmp_path, or any cache or adapter session it
adopts) and ends their life one way (conformance/oracles/lifecycle.py): at teardown
every gate it was given is released, every instance is closed, no thread may
be left running and no background thread may have failed, unless the test
planted that failure and said so (`errors_expected`).

The rest of the shared support lives where the harness keeps it, so tests
and the suite use the same code: random data in conformance/scenarios/workload.py
(`random_rows`, `pool_data`, `same_bytes`), devices in conformance/implementations/devices.py
(`pytest_params`, `needs_gpu`, `torch_device`), rank processes in
conformance/multirank/processes.py (`run_ranks`).
"""

from __future__ import annotations

from pathlib import Path
from importlib.metadata import entry_points
from typing import Any

import pytest

from conformance.adapter import ENTRY_POINT_GROUP
from conformance.bounds import WAIT_S
from conformance.oracles.lifecycle import close_and_check


def _default_pools() -> dict[str, tuple[str, ...]]:
    """Each registry cache's default extra pools: those of its adapter of the same name (the entry points are the one list)."""
    from caches.registry import CACHE_CLASSES

    adapters = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    return {name: tuple(adapters[name].load()().default_extra_pools) for name in CACHE_CLASSES}


POOLS = _default_pools()


def settings(name: str, storage_path: Path | str, **fields: Any) -> dict:
    """Small pools of every kind the cache takes, over a file backend at storage_path; fields override."""
    out = dict(
        page_size=4, device_pages=16, host_pages=16, state_device_slots=8, state_host_slots=16,
        kv_elem_shape=(2, 3), indexer_elem_shape=(5,), state_elem_shape=(6,), extra_pools=POOLS.get(name, ()),
        prefetch_policy="wait_complete", storage_path=str(storage_path), storage_batch_pages=2, wait_timeout_s=WAIT_S,
    )
    out.update(fields)
    return out


class CacheFactory:
    """Builds or adopts caches for one test; `close_all` ends them (the fixture calls it at teardown)."""

    def __init__(self, tmp_path: Path) -> None:
        self.storage_path = tmp_path / "storage"
        self.instances: list[Any] = []
        self.gates: list[Any] = []
        self.errors_expected: list[Any] = []

    settings = staticmethod(settings)

    def build(self, name: str, *, trace=None, clock=None, storage=None, process_group=None, **fields: Any):
        """A registry cache (hiradix, unified_radix, hi_mamba_radix) with `settings(name, ...)`, fields overriding."""
        from caches.registry import build
        from spec.clock import ManualClock

        config = settings(name, fields.pop("storage_path", self.storage_path), **fields)
        cache = build(name, config, trace=trace, clock=clock or ManualClock(1000.0), storage=storage, process_group=process_group)
        return self.adopt(cache)

    def adopt(self, instance: Any) -> Any:
        """Anything with close() and threads() (a cache, an adapter's session): ended with the others."""
        self.instances.append(instance)
        return instance

    def release_before_closing(self, gate: Any) -> Any:
        """A gate whose parked threads must go before the caches close."""
        self.gates.append(gate)
        return gate

    def expect_background_errors(self, instance: Any) -> Any:
        """The test planted a bug on this instance's background thread and checks the error itself."""
        self.errors_expected.append(instance)
        return instance

    def close_all(self) -> None:
        instances, self.instances = self.instances, []
        close_and_check(instances, gates=self.gates, errors_expected=self.errors_expected)


@pytest.fixture
def cache_factory(tmp_path: Path):
    factory = CacheFactory(tmp_path)
    yield factory
    factory.close_all()
