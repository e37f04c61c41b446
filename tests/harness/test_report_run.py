"""What the written report says about the run itself: an interrupted run says so, and each defect entry names its rerun.

Each case runs pytest in-process on a tiny generated suite with
--conformance-report, as tests/harness/test_usage.py runs the plugin, then
reads PATH.json (valid under conformance/report/schema.json), PATH.md and
PATH.html.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

# Imported here so that pytester's in-process runs find them already loaded (torch cannot be imported twice).
import caches.adapters  # noqa: F401
import caches.registry  # noqa: F401
import conformance.plugin.fixtures  # noqa: F401
import conformance.plugin.identity  # noqa: F401
import conformance.plugin.options  # noqa: F401
import conformance.live.plugin  # noqa: F401
import conformance.plugin.recorder  # noqa: F401
import conformance.report.files  # noqa: F401

from pytester_adapters import ADAPTERS

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[2]


INTERRUPTED = '''
import pytest


@pytest.mark.clause("S1")
def test_first_passes(impl):
    pass


@pytest.mark.clause("D3")
def test_then_ctrl_c(impl):
    raise KeyboardInterrupt  # what pressing Ctrl-C raises in the test running then


@pytest.mark.clause("D3")
def test_never_reached(impl):
    assert False, "D3: must not run"
'''

FAILING = '''
import pytest


@pytest.mark.clause("D3")
def test_guard(impl):
    assert False, "D3: voted True while IO 3 was in flight"
'''


def run_with_report(pytester: pytest.Pytester, suite: str, conftest: str | None = None) -> tuple[pytest.RunResult, dict, str, str]:
    pytester.makeini("[pytest]\n")
    if conftest is not None:
        pytester.makeconftest(conftest)
    pytester.makepyfile(adapters_under_test=ADAPTERS, test_suite=suite)
    pytester.syspathinsert()
    result = pytester.runpytest_inprocess("-p", "conformance.plugin", "-p", "conformance.plugin.fixtures", "-p", "no:cacheprovider",
                                          "-p", "no:benchmark", "--cache-impl", "adapters_under_test:good", "test_suite.py",
                                          "--conformance-report", "out/run", no_reraise_ctrlc=True)
    out = pytester.path / "out"
    data = json.loads((out / "run.json").read_text())
    schema = json.loads((REPO / "conformance" / "report" / "schema.json").read_text())
    errors = [f"{list(e.path)}: {e.message}" for e in jsonschema.Draft202012Validator(schema).iter_errors(data)]
    assert not errors, errors
    return result, data, (out / "run.md").read_text(), (out / "run.html").read_text()


def test_an_interrupted_run_says_its_verdicts_cover_only_what_ran(pytester):
    result, data, markdown, html = run_with_report(pytester, INTERRUPTED)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert data["run"]["interrupted"] == "KeyboardInterrupt (Ctrl-C)"
    assert [t["nodeid"].split("::")[1] for t in data["tests"]] == ["test_first_passes[hiradix]"]
    said = "The run was interrupted (KeyboardInterrupt (Ctrl-C)): its verdicts cover only the 1 test that ran"
    assert markdown.splitlines()[2] == f"**{said}; a pass, or no defect, says nothing of the tests it did not reach.**"
    assert said in html.split('<p class="summary">', 1)[0]  # before the "0 defect(s)" line
    assert said in "\n".join(result.outlines)  # and above the matrix in the terminal


BROKEN_OUTPUT = '''
def pytest_runtest_logfinish(nodeid, location):
    if "test_then_ctrl_c" in nodeid:
        raise BrokenPipeError(32, "Broken pipe")  # what a run whose output pipe closed meets at its next write
'''


def test_a_run_that_pytest_itself_ended_says_so(pytester):
    """A run whose terminal went away mid-run (its parent killed) still writes a report: it must not read as complete."""
    result, data, markdown, _ = run_with_report(pytester, INTERRUPTED.replace("raise KeyboardInterrupt", "pass"), BROKEN_OUTPUT)
    assert result.ret == pytest.ExitCode.INTERNAL_ERROR
    assert data["run"]["interrupted"] == "pytest internal error: [Errno 32] Broken pipe"
    assert "test_never_reached[hiradix]" not in [t["nodeid"].split("::")[1] for t in data["tests"]]
    assert "The run was interrupted (pytest internal error: [Errno 32] Broken pipe)" in markdown


def test_a_run_that_ends_is_not_interrupted_and_each_entry_names_its_rerun(pytester):
    result, data, markdown, html = run_with_report(pytester, FAILING)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert data["run"]["interrupted"] is None and "interrupted" not in markdown
    (entry,) = data["defects"]["entries"]
    rerun = ("pytest -p conformance.plugin -p conformance.plugin.fixtures -p no:cacheprovider -p no:benchmark "
             "--cache-impl adapters_under_test:good test_suite.py --clause D3")
    assert entry["clause"] == "D3" and f"- **rerun:** `{rerun}`" in markdown
    assert f"<p><em>Rerun:</em> <code>{rerun}</code></p>" in html


TEARDOWN_ERROR = '''
import pytest


@pytest.fixture
def closing_check():
    yield
    raise AssertionError("threads still running after close(): ['prefetch_thread']")


@pytest.mark.clause("S1")
def test_passes_then_its_close_fails(impl, closing_check):
    pass
'''


def test_a_teardown_error_is_kept_with_its_line_and_explained_on_the_results_page(pytester):
    from conformance.report.results import render

    result, data, _, _ = run_with_report(pytester, TEARDOWN_ERROR)
    (test,) = data["tests"]
    assert (test["pytest_outcome"], test["pytest_errors"]) == ("pass", 1)
    assert test["phase_errors"] == ["teardown: AssertionError: threads still running after close(): ['prefetch_thread']"]
    page = render(data)
    assert "## Errors at setup or teardown" in page and "the harness's closing check" in page
    assert "- 1 test(s): teardown: AssertionError: threads still running after close(): ['prefetch_thread']" in page
    assert "1 passed, 1 error" in page


UNBUILDABLE = '''
import pytest


@pytest.mark.clause("S1")
def test_cannot_build(impl):
    raise ValueError("MambaPoolHost only supports layout='page_first_direct', got 'layer_first'.")
'''


def test_a_failure_naming_no_clause_is_said_on_the_results_page_with_its_error(pytester):
    from conformance.report.results import render

    _, data, _, _ = run_with_report(pytester, UNBUILDABLE)
    (test,) = data["tests"]
    assert test["unnamed_failure"] == "ValueError: MambaPoolHost only supports layout='page_first_direct', got 'layer_first'."
    page = render(data)
    assert "**1 failed test(s) named no clause**, so the row above does not judge them" in page
    assert "- 1 test(s): `ValueError: MambaPoolHost only supports layout='page_first_direct', got 'layer_first'.`" in page
