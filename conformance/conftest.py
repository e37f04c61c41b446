"""The conformance harness's pytest wiring: adapters x devices, clauses, expected failures, the matrix.

Every test that requests the `impl` fixture runs once per adapter, and, if it
requests `device`, once per device (ids like [hiradix-cpu-<own params>]): CPU,
then one cuda:N per visible GPU, or under xdist a single "cuda" run on the GPU
each worker pinned (conformance/devices.py). Implementation tests must name the
spec clauses they check with @pytest.mark.clause("S1", "F3"); a run ends with
the implementation x device x clause matrix (conformance/report.py), written as
JSON and Markdown with --conformance-report PATH. Expected failures come from
conformance/expected_failures/<impl>.toml, the adapter, and --expected-failures
(conformance/expectations.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conformance import devices
from conformance.adapter import CacheEnv
from conformance.capabilities import require
from conformance.expectations import Expectations, collect as collect_expected_failures
from conformance.failures import failure_properties
from conformance.gates import Gate
from conformance.live import plugin as live_plugin
from conformance.loader import load_adapters, load_checkout_adapters
from conformance.report import MATCHED_KEY, MatrixRecorder, item_properties
from spec.clauses import CATALOGUE
from spec.clock import ManualClock
from spec.config import TerminationConfig
from spec.errors import ConfigError
from spec.trace import TraceRecorder


@dataclass
class Harness:
    """What one pytest process decided at configure time (never shared between workers)."""

    adapters: list
    expectations: Expectations
    distributed: bool  # xdist worker or controller: one "cuda" param
    missing: list = field(default_factory=list)  # (implementation, why not run): classes a --sglang checkout lacks
    _device_params: list[devices.DeviceParam] | None = field(default=None, repr=False)

    def device_params(self) -> list[devices.DeviceParam]:
        if self._device_params is None:  # first use is after pinning: CUDA may initialize now
            self._device_params = devices.device_params(self.distributed, devices.visible_gpu_count())
        return self._device_params

    def device_ids(self) -> list[str]:
        if self.distributed:  # the controller need not initialize CUDA to know the columns
            return [devices.CPU, devices.CUDA]
        return [param.id for param in self.device_params()]


HARNESS = pytest.StashKey[Harness]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("conformance")
    group.addoption("--cache-impl", action="append", default=[], metavar="MODULE:FACTORY",
                    help="run this adapter (repeatable) instead of the registered entry points")
    group.addoption("--conformance-report", default=None, metavar="PATH",
                    help="write the conformance matrix as PATH.json and PATH.md")
    group.addoption("--sglang", default=None, metavar="PATH",
                    help="also run SGLang's own decision code, read from the checkout at PATH (its root), as sglang:hiradix, sglang:unified_radix, sglang:hi_mamba_radix")
    group.addoption("--sglang-shim", default=None, metavar="MODULE:FACTORY",
                    help="the factory turning --sglang PATH into adapters (default: the 'sglang' entry point of hicache_conformance.checkout_adapters)")
    group.addoption("--expected-failures", action="append", default=[], metavar="PATH",
                    help="TOML file of [[xfail]] entries (test, reason, optional clause and impl; impl defaults to the file's stem); repeatable")
    live_plugin.addoption(group)


def _distributing(config: pytest.Config) -> bool:
    return config.getoption("dist", "no") != "no" and bool(config.getoption("tx", None))


def _one_line(exc: BaseException) -> str:
    text = str(exc) if isinstance(exc, ConfigError) else f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())


@pytest.hookimpl(tryfirst=True)  # pin the worker's GPU before any other plugin could touch CUDA
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "clause(*ids): spec clause IDs this test checks")
    if not any(line.startswith("gpu:") for line in config.getini("markers")):
        config.addinivalue_line("markers", "gpu: needs a CUDA device; skipped with a reason where none is visible")
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        # Before anything initializes CUDA in this worker (adapters are loaded below).
        devices.pin_worker_gpu(workerinput["workerid"])
    try:
        adapters = load_adapters(config.getoption("--cache-impl"), extra=live_plugin.live_adapters(config))
    except Exception as exc:  # a bad adapter is a usage error, whatever the factory raised
        specs = config.getoption("--cache-impl")
        prefix = "" if isinstance(exc, ConfigError) else f"loading adapters {specs or '(entry points)'} failed: "
        raise pytest.UsageError(prefix + _one_line(exc)) from None
    missing = _add_checkout_adapters(config, adapters)
    try:
        entries = collect_expected_failures(adapters, config.getoption("--expected-failures"))
    except ConfigError as exc:
        raise pytest.UsageError(_one_line(exc)) from None
    harness = Harness(adapters, Expectations(entries), workerinput is not None or _distributing(config), missing)
    config.stash[HARNESS] = harness
    if workerinput is None:
        recorder = MatrixRecorder(
            adapter_names=[a.name for a in adapters],
            device_ids=harness.device_ids,
            expectations=harness.expectations,
            clause_titles={cid: clause.title for cid, clause in CATALOGUE.items()},
            report_path=config.getoption("--conformance-report"),
            missing=missing,
        )
        config.pluginmanager.register(recorder, "conformance-matrix")


def _add_checkout_adapters(config: pytest.Config, adapters: list) -> list[tuple[str, str]]:
    """--sglang PATH: append the checkout's adapters; returns the classes it lacks, with why."""
    path = config.getoption("--sglang")
    if path is None:
        return []
    try:
        found, missing = load_checkout_adapters("sglang", path, config.getoption("--sglang-shim"))
    except Exception as exc:  # the factory's own error, on one line
        raise pytest.UsageError(f"--sglang {path}: " + _one_line(exc)) from None
    clash = sorted({a.name for a in found} & {a.name for a in adapters})
    if clash:
        raise pytest.UsageError(f"--sglang {path}: adapter names {clash} are already taken")
    adapters.extend(found)
    return missing


def pytest_report_header(config: pytest.Config) -> list[str]:
    harness = config.stash.get(HARNESS, None)
    if harness is None:
        return []
    where = "one GPU per xdist worker" if harness.distributed else "every visible GPU in this process"
    lines = [f"conformance: implementations {', '.join(a.name for a in harness.adapters)}; "
             f"devices {', '.join(harness.device_ids())} ({where}); {len(harness.expectations.entries)} expected failure(s)"]
    return lines + [f"conformance: {name} not run: {why}" for name, why in harness.missing] + live_plugin.report_lines(config)


def _clause_ids(item: pytest.Item) -> list[str]:
    ids: list[str] = []
    for marker in item.iter_markers("clause"):
        ids += [c for c in marker.args if c not in ids]
    return ids


def _clause_problems(item: pytest.Item) -> list[str]:
    problems = []
    for marker in item.iter_markers("clause"):
        unknown = [c for c in marker.args if c not in CATALOGUE]
        if unknown or not marker.args:
            problems.append(f"{item.name}: @pytest.mark.clause names unknown clauses {unknown or '(none)'}")
    if "impl" in getattr(item, "fixturenames", ()) and not any(True for _ in item.iter_markers("clause")):
        problems.append(f"{item.name}: runs against an implementation but has no @pytest.mark.clause(...)")
    return problems


@pytest.hookimpl(wrapper=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: object):
    """Fail collection (also under xdist) for a test citing unknown clauses, or an impl test citing none."""
    result = yield
    items = result if isinstance(result, list) else [result] if isinstance(result, pytest.Item) else []
    problems = list(dict.fromkeys(p for item in items if isinstance(item, pytest.Item) for p in _clause_problems(item)))
    if problems:
        raise collector.CollectError(
            "conformance tests must cite spec clauses: " + "; ".join(problems) + f" (known clauses: {', '.join(CATALOGUE)})")
    return result


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    harness = config.stash[HARNESS]
    for item in items:
        callspec = getattr(item, "callspec", None)
        adapter = callspec.params.get("impl") if callspec is not None else None
        if adapter is None:
            continue
        clauses = _clause_ids(item)
        device = callspec.params.get("device", devices.ANY_DEVICE)
        item.user_properties.extend(item_properties(adapter.name, device, clauses))
        entry = harness.expectations.find(adapter.name, getattr(item, "originalname", item.name), item.name, clauses)
        if entry is not None:
            item.add_marker(pytest.mark.xfail(strict=True, reason=f"expected failure of {adapter.name} ({entry.source}): {entry.reason}"))
    workeroutput = getattr(config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput[MATCHED_KEY] = sorted(harness.expectations.matched)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A failed phase's report carries the clauses its failure names (conformance/failures.py), for the matrix."""
    report = yield
    if report.failed and call.excinfo is not None:
        report.user_properties = [*report.user_properties, *failure_properties(call.excinfo)]
    return report


@pytest.hookimpl(tryfirst=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    harness = metafunc.config.stash[HARNESS]
    if "impl" in metafunc.fixturenames:
        adapters = harness.adapters
        metafunc.parametrize("impl", adapters, ids=[a.name for a in adapters], scope="function")
    if "device" in metafunc.fixturenames:
        params = []
        for param in harness.device_params():
            marks = [pytest.mark.gpu] if param.is_gpu else []
            if param.skip_reason:
                marks.append(pytest.mark.skip(reason=param.skip_reason))
            params.append(pytest.param(param.id, id=param.id, marks=marks))
        metafunc.parametrize("device", params, indirect=True)


@pytest.fixture
def device(request: pytest.FixtureRequest) -> str:
    """The torch device string: "cpu", "cuda:N", or (under xdist) "cuda:0", the worker's pinned GPU."""
    param = request.param
    if param != devices.CPU and devices.visible_gpu_count() == 0:
        pytest.skip(devices.no_gpu_reason())
    return devices.torch_device(param)


@pytest.fixture(name="require")
def require_fixture():
    """require(impl, "pool:mamba", ...): skip unless the adapter declares those capabilities."""
    return require


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

    Every instance is closed at teardown, must leave no thread behind and, when
    it reports them (`background_errors()`), no unexpected background error.
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
    leftovers, background = [], []
    for session in sessions:
        session.close()
        leftovers += [t.name for t in session.threads() if t.is_alive()]
        report = getattr(session, "background_errors", None)  # optional member of the protocol
        if callable(report):
            background += [str(error) for error in report()]
    assert not leftovers, f"threads still running after close(): {leftovers}"
    assert not background, f"unexpected exceptions on background threads (bugs, not storage faults): {background}"
