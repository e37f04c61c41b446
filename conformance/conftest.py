"""The conformance harness's pytest wiring: adapters x devices, fixtures, clause markers.

Every test that requests the `impl` fixture runs once per adapter and device
(ids like [hiradix-cpu-...]). Tests name the spec clauses they check with
@pytest.mark.clause("S1", "F3").
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from conformance.adapter import CacheEnv
from conformance.gates import Gate
from conformance.loader import load_adapters
from spec.clauses import CATALOGUE
from spec.clock import ManualClock
from spec.config import TerminationConfig
from spec.errors import ConfigError
from spec.trace import TraceRecorder


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("conformance")
    group.addoption("--cache-impl", action="append", default=[], metavar="MODULE:FACTORY",
                    help="run this adapter (repeatable) instead of the registered entry points")
    group.addoption("--conformance-report", default=None, metavar="PATH",
                    help="write the conformance matrix as PATH.json and PATH.md")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "clause(*ids): spec clause IDs this test checks")
    try:
        config._conformance_adapters = load_adapters(config.getoption("--cache-impl"))
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for marker in item.iter_markers("clause"):
            unknown = [c for c in marker.args if c not in CATALOGUE]
            if unknown or not marker.args:
                raise pytest.UsageError(f"{item.nodeid}: clause marker names unknown clauses {unknown or '(none)'}; known: {', '.join(CATALOGUE)}")


def available_devices() -> list[str]:
    import torch

    devices = ["cpu"]
    if torch.cuda.is_available():
        devices += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    return devices


@pytest.hookimpl(tryfirst=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "impl" in metafunc.fixturenames:
        adapters = metafunc.config._conformance_adapters
        metafunc.parametrize("impl", adapters, ids=[a.name for a in adapters], scope="function")
    if "device" in metafunc.fixturenames:
        params = []
        for device in ["cpu", "cuda"]:
            marks = [] if device == "cpu" else [pytest.mark.gpu]
            params.append(pytest.param(device, id=device, marks=marks))
        metafunc.parametrize("device", params, indirect=True)


@pytest.fixture
def device(request: pytest.FixtureRequest) -> str:
    kind = request.param
    if kind == "cpu":
        return "cpu"
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible")
    return "cuda:0"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1000.0)


@pytest.fixture
def trace(clock: ManualClock) -> TraceRecorder:
    return TraceRecorder(clock)


@pytest.fixture
def gate(trace: TraceRecorder):
    g = Gate(trace)
    yield g
    g.close()


@pytest.fixture
def make_cache(impl, device, clock, trace, gate, tmp_path: Path):
    """make_cache(policy=..., page_size=..., **CacheEnv fields) -> a CacheUnderTest.

    Every instance is closed at teardown, and must leave no thread behind.
    """
    sessions = []

    def make(policy: str = "wait_complete", page_size: int = 4, *, storage_dir: Path | None = None, **env_fields):
        termination = env_fields.pop("termination", None) or TerminationConfig(policy=policy, page_size=page_size)
        extra = env_fields.pop("extra_pools", impl.default_extra_pools)
        env = CacheEnv(
            device=device,
            termination=termination,
            storage_dir=storage_dir or tmp_path / "storage",
            clock=env_fields.pop("clock", clock),
            trace=env_fields.pop("trace", trace),
            extra_pools=tuple(extra),
            **env_fields,
        )
        session = impl.create(env)
        sessions.append(session)
        return session

    yield make
    gate.release_all()  # a parked thread would keep close() from finishing
    leftovers = []
    for session in sessions:
        session.close()
        leftovers += [t.name for t in session.threads() if t.is_alive()]
    assert not leftovers, f"threads still running after close(): {leftovers}"
