"""Usage errors and collection failures of the conformance harness, and GPU pinning under xdist.

Each case runs pytest on a tiny generated suite with the harness loaded as a
plugin (in-process where xdist is not involved); a usage error must be one line
on stderr, never a traceback.
"""

from __future__ import annotations

import pytest

# Imported here so that pytester's in-process runs find them already loaded:
# it drops modules first imported during a run, and torch cannot be imported twice.
import caches.adapters  # noqa: F401
import caches.registry  # noqa: F401 (caches.adapters defers the caches, and torch, to first use)
import conformance.plugin.fixtures  # noqa: F401
import conformance.plugin.identity  # noqa: F401
import conformance.live.plugin  # noqa: F401
import conformance.plugin.recorder  # noqa: F401
import conformance.report.html  # noqa: F401

pytest_plugins = ["pytester"]

USAGE_ERROR = 4

ADAPTERS = '''
from caches.adapters import hiradix


def good():
    return hiradix()


def raises():
    raise RuntimeError("cannot reach the storage daemon\\nat localhost")


def not_an_adapter():
    return object()


def unknown_capability():
    adapter = hiradix()
    return type(adapter)(adapter.name, adapter.default_extra_pools, frozenset({"teleport"}))
'''

SUITE = '''
import pytest


@pytest.mark.clause("S1")
def test_cites(impl, device):
    assert impl.name == "hiradix"
'''

NO_CLAUSE = '''
def test_forgot_the_marker(impl, device):
    pass


def test_plain_helper_needs_none():
    pass
'''

UNKNOWN_CLAUSE = '''
import pytest


@pytest.mark.clause("S1", "Z9")
def test_cites_nonsense():
    pass
'''

WEAK_WITHOUT_REASON = '''
import pytest


@pytest.mark.weak()
def test_weak_without_a_reason(impl):
    pass
'''

WEAK_YET_CITING = '''
import pytest


@pytest.mark.weak("builds a cache")
@pytest.mark.clause("S1")
def test_weak_yet_citing(impl):
    pass
'''

PIN_PROBE = '''
import os
from pathlib import Path

# At import, i.e. during collection, which every xdist worker does in full.
_out = Path(os.environ["PIN_OUT"])
_out.mkdir(exist_ok=True)
(_out / os.environ["PYTEST_XDIST_WORKER"]).write_text(os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>"))


def test_probe_collected():
    assert _out.is_dir()
'''


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(adapters_under_test=ADAPTERS, test_suite=SUITE, test_no_clause=NO_CLAUSE, test_unknown_clause=UNKNOWN_CLAUSE,
                        test_weak_without_reason=WEAK_WITHOUT_REASON, test_weak_yet_citing=WEAK_YET_CITING)
    pytester.makefile(".toml", no_reason='[[xfail]]\ntest = "test_cites"\n')
    pytester.syspathinsert()
    return pytester


def run_in_process(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    # In-process keeps these runs fast; the module snapshot pytester takes undoes the imports.
    return pytester.runpytest_inprocess("-p", "conformance.plugin", "-p", "conformance.plugin.fixtures", "-p", "no:cacheprovider", "-p", "no:benchmark", *args)


def assert_one_line_usage_error(result: pytest.RunResult, *fragments: str) -> str:
    lines = [line for line in result.errlines if line.strip()]
    output = "\n".join(result.outlines + result.errlines)
    assert result.ret == USAGE_ERROR, output
    assert len(lines) == 1 and lines[0].startswith("ERROR: "), output
    assert "Traceback" not in output
    for fragment in fragments:
        assert fragment in lines[0]
    return lines[0]


@pytest.mark.parametrize("spec, fragments", [
    ("no_colon_here", ("--cache-impl", "'no_colon_here'", "package.module:factory")),
    ("no_such_module:factory", ("no_such_module", "importable module")),
    ("adapters_under_test:missing", ("'missing'", "adapters_under_test")),
    ("adapters_under_test:raises", ("RuntimeError", "cannot reach the storage daemon at localhost")),
    ("adapters_under_test:not_an_adapter", ("adapters_under_test:not_an_adapter", "CacheAdapter")),
    ("adapters_under_test:unknown_capability", ("teleport", "pool:mamba")),
], ids=["no-colon", "no-module", "no-attribute", "factory-raises", "not-an-adapter", "unknown-capability"])
def test_bad_cache_impl_is_a_one_line_usage_error(suite, spec, fragments):
    result = run_in_process(suite, "--cache-impl", spec, "test_suite.py", "-q")
    assert_one_line_usage_error(result, *fragments)


def test_expected_failure_without_reason_is_a_usage_error(suite):
    result = run_in_process(suite, "--cache-impl", "adapters_under_test:good", "--expected-failures", "no_reason.toml", "test_suite.py", "-q")
    assert_one_line_usage_error(result, "no_reason.toml", "'test_cites'", "reason")


def assert_clause_collection_errors(output: str) -> None:
    assert "INTERNALERROR" not in output, output
    assert "ERROR collecting test_no_clause.py" in output, output
    assert "test_forgot_the_marker[hiradix-cpu]: runs against an implementation but has no @pytest.mark.clause" in output
    assert "test_plain_helper_needs_none" not in output  # a test without impl needs no clause
    assert "ERROR collecting test_unknown_clause.py" in output and "unknown clauses ['Z9']" in output


def test_missing_or_unknown_clause_fails_collection(suite):
    result = run_in_process(suite, "--cache-impl", "adapters_under_test:good", "test_no_clause.py", "test_unknown_clause.py", "test_suite.py", "-q")
    assert result.ret == pytest.ExitCode.INTERRUPTED  # collection errors stop the run
    assert_clause_collection_errors("\n".join(result.outlines))
    result.assert_outcomes(errors=2)


def test_a_weak_test_needs_a_reason_and_cites_nothing(suite):
    result = run_in_process(suite, "--cache-impl", "adapters_under_test:good", "test_weak_without_reason.py", "test_weak_yet_citing.py", "-q")
    output = "\n".join(result.outlines)
    assert result.ret == pytest.ExitCode.INTERRUPTED, output
    result.assert_outcomes(errors=2)
    assert "test_weak_without_a_reason[hiradix]: @pytest.mark.weak needs a reason" in output, output
    assert "test_weak_yet_citing[hiradix]: is marked weak, so it cites no clause, yet has @pytest.mark.clause(...)" in output, output


def test_gpu_params_carry_the_gpu_marker(suite):
    from conformance.implementations.devices import device_params, visible_gpu_count

    result = run_in_process(suite, "--cache-impl", "adapters_under_test:good", "test_suite.py", "--co", "-q", "-m", "gpu")
    collected = [line for line in result.outlines if "::" in line]
    gpu_ids = [p.id for p in device_params(False, visible_gpu_count()) if p.is_gpu]
    assert collected == [f"test_suite.py::test_cites[hiradix-{gpu}]" for gpu in gpu_ids], result.outlines


def test_under_xdist_clause_errors_fail_collection_and_workers_pin_gpus(subprocess_pytest, tmp_path):
    """One -n 2 run: workers report the clause errors as collection errors (no internal error),
    and each worker kept one entry of the caller's CUDA_VISIBLE_DEVICES (index modulo length)."""
    workdir = tmp_path / "suite"
    workdir.mkdir()
    (workdir / "pytest.ini").write_text("[pytest]\n")
    for name, text in {"adapters_under_test.py": ADAPTERS, "test_no_clause.py": NO_CLAUSE,
                       "test_unknown_clause.py": UNKNOWN_CLAUSE, "test_pin_probe.py": PIN_PROBE}.items():
        (workdir / name).write_text(text)
    out = tmp_path / "pinned"
    result = subprocess_pytest.run(workdir, "--cache-impl", "adapters_under_test:good", "-n", "2", "-q", "--continue-on-collection-errors",
                        env_extra={"CUDA_VISIBLE_DEVICES": "GPU-aaaa,GPU-bbbb", "PIN_OUT": str(out)})
    assert result.returncode == 1, result.stdout + result.stderr
    assert_clause_collection_errors(result.stdout)
    seen = {path.name: path.read_text() for path in out.iterdir()}
    assert seen == {"gw0": "GPU-aaaa", "gw1": "GPU-bbbb"}
