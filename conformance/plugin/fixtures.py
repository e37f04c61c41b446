"""What conformance tests are written against: their fixtures, parametrization and clause markers.

conformance/suite/conftest.py applies this module to the package's own tests, and
pytest scopes a conftest's fixtures and hooks to its folder, so a test
elsewhere keeps its own `impl`, `device` or `clock`. A project writing its own
conformance tests loads it for its tests with `pytest_plugins =
["conformance.plugin.fixtures"]` in its root conftest.py (which also asks the plugin
to run the suite).

Every test that requests `impl` runs once per adapter, and, if it requests
`device`, once per device (ids like [hiradix-cpu-<own params>]): CPU, then
one cuda:N per visible GPU, or under xdist a single "cuda" run on the GPU each
worker pinned (conformance/implementations/devices.py). Such a test names the spec clauses it
checks with @pytest.mark.clause("S1", "F3"); a test that checks no rule of an
implementation (a control, plumbing) says so with @pytest.mark.weak("why")
instead and cites nothing, so it cannot paint a clause. A test with neither,
with both, or citing an unknown clause fails collection.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conformance.implementations import devices
from conformance.adapter import CacheEnv, adapter_abort_paths, adapter_page_size
from conformance.implementations.capabilities import require
from conformance.report.causes import forget, observe
from conformance.report.failures import PROP_FAILED
from conformance.plugin.headline import annotate_failure
from conformance.gates import Gate
from conformance.oracles.lifecycle import close_and_check
from conformance.plugin import harness_of
from conformance.report.matrix import PROP_DEVICE_NOT_RUN
from conformance.implementations.requirements import check_requirement
from conformance.scenarios.schedule_model import check_io_order
from spec.clauses import CATALOGUE
from spec.errors import ConfigError
from spec.preconditions import PRECONDITIONS
from spec.profiles import Profile
from spec.clock import ManualClock
from spec.config import TerminationConfig
from spec.trace import TraceRecorder

__all__ = [
    "pytest_configure", "pytest_pycollect_makeitem", "pytest_generate_tests", "pytest_runtest_makereport",
    "device", "require_fixture", "harness", "profile", "page_size", "clock", "trace", "gate", "make_cache",
]

# The test's own failure, as its exception says it: the teardown check does not report it a second time.
CALL_FAILURE = pytest.StashKey[str]()
_PARAMETRIZED = pytest.StashKey[bool]()  # a definition seen twice (this module loaded globally and by the conftest)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "clause(*ids): spec clause IDs this conformance test checks")
    config.addinivalue_line("markers", "precondition(*ids): what the scenario assumes of the deployment (spec/preconditions.py); "
                                       "an adapter whose deployment does not produce one is not judged by it")
    config.addinivalue_line("markers", "needs(*requirements): what the test needs of an adapter (conformance/implementations/requirements.py); "
                                       "no item is collected for an adapter without it")
    config.addinivalue_line("markers", "weak(reason): a conformance test that checks no rule of the implementation; it cites no clause")
    config.addinivalue_line("markers", "io_order(order, why): the test drives IO in that order (schedule_model.IO_ORDERS); "
                                       "an adapter declaring another skips it, saying so")
    if not any(line.startswith("gpu:") for line in config.getini("markers")):
        config.addinivalue_line("markers", "gpu: needs a CUDA device; skipped with a reason where none is visible")


def _clause_problems(item: pytest.Item) -> list[str]:
    problems = []
    for marker in item.iter_markers("clause"):
        unknown = [c for c in marker.args if c not in CATALOGUE]
        if unknown or not marker.args:
            problems.append(f"{item.name}: @pytest.mark.clause names unknown clauses {unknown or '(none)'}")
    for marker in item.iter_markers("needs"):
        for requirement in marker.args:
            try:
                check_requirement(requirement)
            except ConfigError as exc:
                problems.append(f"{item.name}: @pytest.mark.needs: {exc}")
    for marker in item.iter_markers("io_order"):
        try:
            check_io_order(marker.args[0] if marker.args else None, "io_order marker")
        except ConfigError as exc:
            problems.append(f"{item.name}: @pytest.mark.io_order: {exc}")
    for marker in item.iter_markers("precondition"):
        unknown = [p for p in marker.args if p not in PRECONDITIONS]
        if unknown or not marker.args:
            problems.append(f"{item.name}: @pytest.mark.precondition names unknown preconditions {unknown or '(none)'} "
                            f"(known: {', '.join(PRECONDITIONS)})")
    if "impl" not in getattr(item, "fixturenames", ()):
        return problems
    cites = any(True for _ in item.iter_markers("clause"))
    weak = item.get_closest_marker("weak")
    if weak is not None and cites:
        problems.append(f"{item.name}: is marked weak, so it cites no clause, yet has @pytest.mark.clause(...)")
    elif weak is not None and not (weak.args and str(weak.args[0]).strip()):
        problems.append(f"{item.name}: @pytest.mark.weak needs a reason (what it checks, and why that is no rule)")
    elif weak is None and not cites:
        problems.append(f"{item.name}: runs against an implementation but has no @pytest.mark.clause(...) (or @pytest.mark.weak(reason))")
    return problems


@pytest.hookimpl(wrapper=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: object):
    """Fail collection (also under xdist) for a test citing unknown clauses, or an impl test citing none and not weak."""
    result = yield
    items = result if isinstance(result, list) else [result] if isinstance(result, pytest.Item) else []
    problems = list(dict.fromkeys(p for item in items if isinstance(item, pytest.Item) for p in _clause_problems(item)))
    if problems:
        raise collector.CollectError(
            "conformance tests must cite spec clauses: " + "; ".join(problems) + f" (known clauses: {', '.join(CATALOGUE)})")
    return result


@pytest.hookimpl(tryfirst=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "impl" not in metafunc.fixturenames or metafunc.definition.stash.get(_PARAMETRIZED, False):
        return
    metafunc.definition.stash[_PARAMETRIZED] = True
    harness = harness_of(metafunc.config)
    if "abort_path" in metafunc.fixturenames:
        # Each implementation with each of its scheduler's abort paths (adapter.abort_paths; declaring none: its one abort).
        pairs = [(a, path) for a in harness.adapters for path in adapter_abort_paths(a)]
        metafunc.parametrize(("impl", "abort_path"), pairs, ids=[f"{a.name}-{path}" for a, path in pairs], scope="function")
    else:
        metafunc.parametrize("impl", harness.adapters, ids=[a.name for a in harness.adapters], scope="function")
    if "device" in metafunc.fixturenames:
        metafunc.parametrize("device", devices.pytest_params(harness.device_params()), indirect=True)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A failed phase's report carries the clauses its failure names (conformance/report/failures.py), for the matrix.

    Formatting a failure reads the source of every frame in its traceback;
    frames of code nobody here wrote (an SGLang tree's threads) have made
    that step raise (a SystemError from the parser), which took the whole
    session down as an INTERNALERROR. Such a failure is reported with its
    exception alone instead.
    """
    try:
        report = yield
    except Exception as exc:
        report = unformatted_report(item, call, exc)
    if call.when == "call" and report.failed and call.excinfo is not None:
        item.stash[CALL_FAILURE] = str(call.excinfo.value)
    if report.failed and call.excinfo is not None and not any(p == PROP_FAILED for p, *_ in report.user_properties):
        annotate_failure(report, call.excinfo, item)  # the clauses and causes it names; its output leads with them
    if call.when == "teardown":
        forget(item)
    return report


def unformatted_report(item: pytest.Item, call: pytest.CallInfo, error: BaseException) -> pytest.TestReport:
    """The phase's report, its failure shown as the exception's one-line summary (pytest could not format the traceback)."""
    excinfo = call.excinfo
    longrepr: Any = None
    outcome = "passed"
    if excinfo is not None and isinstance(excinfo.value, pytest.skip.Exception):
        outcome, longrepr = "skipped", (str(item.path), item.location[1] or 0, f"Skipped: {excinfo.value}")
    elif excinfo is not None:
        outcome = "failed"
        longrepr = f"{excinfo.exconly()}\n(the traceback could not be formatted: {type(error).__name__}: {error})"
    return pytest.TestReport(item.nodeid, item.location, {k: 1 for k in item.keywords}, outcome, longrepr, call.when,
                             user_properties=list(item.user_properties), duration=call.duration, start=call.start, stop=call.stop)


@pytest.fixture
def device(request: pytest.FixtureRequest) -> str:
    """The torch device string: "cpu", "cuda:N", or (under xdist) "cuda:0", the worker's pinned GPU."""
    param = request.param
    if param != devices.CPU and devices.visible_gpu_count() == 0:
        reason = devices.no_gpu_reason()
        request.node.user_properties.append((PROP_DEVICE_NOT_RUN, reason))
        pytest.skip(reason)
    return devices.torch_device(param)


@pytest.fixture(name="require")
def require_fixture():
    """require(impl, "pool:mamba", ...): skip unless the adapter declares those capabilities."""
    return require


@pytest.fixture
def harness(request: pytest.FixtureRequest):
    """The session's harness: its adapters, what each declares (declarations_of), its devices."""
    return harness_of(request.config)


@pytest.fixture
def profile(request: pytest.FixtureRequest) -> Profile:
    """The architecture profile the test's implementation declares (spec/profiles.py): whose vote, combine and timer judge it."""
    return profile_of(request)


def profile_of(request: pytest.FixtureRequest) -> Profile:
    from spec.profiles import profile as find_profile

    callspec = getattr(request.node, "callspec", None)
    impl = callspec.params.get("impl") if callspec is not None else None
    if impl is None:
        return find_profile(None)
    return harness_of(request.config).declarations_of(impl).profile


@pytest.fixture
def page_size(impl) -> int:
    """The page size the test's implementation runs at (its adapter's `page_size`, else 4): scenarios size requests by it."""
    return adapter_page_size(impl)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1000.0)


@pytest.fixture
def trace(clock: ManualClock, request: pytest.FixtureRequest) -> TraceRecorder:
    """The trace the test's cache records into, judged under its declared profile."""
    return TraceRecorder(clock, profile=profile_of(request).id)


@pytest.fixture
def gate(trace: TraceRecorder):
    g = Gate(trace)
    yield g
    g.close()


@pytest.fixture
def make_cache(impl, device, clock, trace, gate, page_size, tmp_path: Path, request: pytest.FixtureRequest):
    """make_cache(policy=..., page_size=..., **CacheEnv fields) -> a CacheUnderTest (page_size: the implementation's own by default).

    Every instance is closed at teardown, must leave no thread behind and, when
    it reports them (`background_errors()`), no unexpected background error.
    """
    sessions = []
    traces = []

    default_page_size = page_size

    def make(policy: str = "wait_complete", page_size: int = default_page_size, *, storage_dir: Path | None = None, **env_fields):
        __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
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
        traces.append(env.trace)
        observe(request.node, env.trace, env.termination, session)  # for the failure's cause (conformance/report/causes.py)
        return session

    make.page_size = default_page_size  # what helpers that take make_cache size their requests by
    yield make
    close_and_check(sessions, gates=[gate], traces=traces, already_reported=request.node.stash.get(CALL_FAILURE, ""))
