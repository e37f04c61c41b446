"""The conformance options as a user gives them: a bad value stops the run before its first test, in one line; --clause and -k ID select.

Each case runs pytest in-process on a tiny generated suite with the plugin
loaded, as tests/harness/test_usage.py does.
"""

from __future__ import annotations

import pytest

# Imported here so that pytester's in-process runs find them already loaded (torch cannot be imported twice).
import caches.adapters  # noqa: F401
import caches.registry  # noqa: F401
import conformance.plugin.fixtures  # noqa: F401
import conformance.plugin.options  # noqa: F401
import conformance.live.plugin  # noqa: F401
import conformance.plugin.recorder  # noqa: F401
from spec.clauses import CATALOGUE

from pytester_adapters import ADAPTERS

pytest_plugins = ["pytester"]


SUITE = '''
import pytest


@pytest.mark.clause("S1")
def test_cites_s1(impl):
    pass


@pytest.mark.clause("D3", "F3")
def test_cites_two(impl):
    pass


@pytest.mark.weak("checks the plumbing alone")
def test_cites_nothing(impl):
    pass
'''


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(adapters_under_test=ADAPTERS, test_suite=SUITE)
    pytester.syspathinsert()
    return pytester


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_inprocess("-p", "conformance.plugin", "-p", "conformance.plugin.fixtures", "-p", "no:cacheprovider",
                                        "-p", "no:benchmark", "--cache-impl", "adapters_under_test:good", "test_suite.py", *args)


def one_usage_error(result: pytest.RunResult, *fragments: str) -> str:
    """The run stopped at configure: exit 4, one ERROR line naming the fragments, no traceback, no test collected."""
    lines = [line for line in result.errlines if line.strip()]
    output = "\n".join(result.outlines + result.errlines)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, output
    assert len(lines) == 1 and lines[0].startswith("ERROR: "), output
    assert "Traceback" not in output and "collected" not in output and "test_cites" not in output, output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def test_an_existing_file_as_repro_folder_is_refused_before_the_run(suite):
    suite.makefile(".txt", taken="an earlier run's notes")
    one_usage_error(run(suite, "--conformance-repro", "taken.txt"), "invalid --conformance-repro: 'taken.txt'", "a folder", "it is a file")


def test_a_repro_folder_under_a_file_is_refused(suite):
    suite.makefile(".txt", taken="")
    one_usage_error(run(suite, "--conformance-repro", "taken.txt/scripts"), "--conformance-repro", "taken.txt is a file")


@pytest.mark.parametrize("value, fragment", [
    ("out", "it is a folder, so the report would go beside it as out.json; name a prefix inside it, e.g. out/report"),
    ("fresh/", "it is a folder"),
    ("run.json", "it would write run.json.json; give the prefix without .json"),
    ("taken.txt/report", "taken.txt is a file, so no folder can be created under it"),
], ids=["existing-folder", "trailing-slash", "report-suffix", "parent-is-a-file"])
def test_a_report_path_that_would_be_misread_is_refused(suite, value, fragment):
    (suite.path / "out").mkdir()
    suite.makefile(".txt", taken="")
    line = one_usage_error(run(suite, "--conformance-report", value), f"invalid --conformance-report: {value!r}", "a path prefix", fragment)
    assert not (suite.path / "out.json").exists() and not (suite.path / "fresh").exists(), line


def test_a_shim_without_a_checkout_is_refused(suite):
    one_usage_error(run(suite, "--sglang-shim", "my_pkg:shim"), "--sglang-shim", "'my_pkg:shim'", "no --sglang PATH was given")


def test_an_unknown_clause_is_refused_naming_every_accepted_id(suite):
    line = one_usage_error(run(suite, "--clause", "D3,Z9"), "invalid --clause: 'D3,Z9'", "unknown: Z9")
    assert ", ".join(CATALOGUE) in line


def collected(result: pytest.RunResult) -> list[str]:
    return [line for line in result.outlines if "::" in line]


def test_clause_keeps_only_the_tests_citing_it(suite):
    result = run(suite, "--clause", "d3", "--co", "-q")
    assert collected(result) == ["test_suite.py::test_cites_two[hiradix]"], result.outlines
    assert any("2 deselected" in line for line in result.outlines), result.outlines
    result = run(suite, "--clause", "S1,F3", "--co", "-q")
    assert collected(result) == ["test_suite.py::test_cites_s1[hiradix]", "test_suite.py::test_cites_two[hiradix]"], result.outlines


def test_dash_k_matches_the_clauses_a_test_cites(suite):
    result = run(suite, "-k", "D3", "--co", "-q")
    assert collected(result) == ["test_suite.py::test_cites_two[hiradix]"], result.outlines
    result = run(suite, "-k", "S1 or F3", "--co", "-q")
    assert collected(result) == ["test_suite.py::test_cites_s1[hiradix]", "test_suite.py::test_cites_two[hiradix]"], result.outlines


NEEDS_SUITE = '''
import pytest


@pytest.mark.needs("pool:swa")
@pytest.mark.clause("F10")
def test_needs_a_window(impl):
    pass


@pytest.mark.clause("S1")
def test_cites_s1(impl):
    pass
'''


def test_a_test_dash_k_deselected_is_not_judged_in_the_matrix(suite):
    """-k dropped the test the harness would have left out (it needs a window pool): its clause is uncovered, not 'not judged'."""
    suite.makepyfile(test_needs=NEEDS_SUITE)
    args = ("-p", "conformance.plugin", "-p", "conformance.plugin.fixtures", "-p", "no:cacheprovider", "-p", "no:benchmark",
            "--cache-impl", "adapters_under_test:good", "test_needs.py")

    def f10_cell(*extra: str) -> str:
        lines = suite.runpytest_inprocess(*args, *extra).outlines
        header = next(line.split() for line in lines if line.split()[:2] == ["C1", "C2"])
        row = next(line.split() for line in lines if line.startswith("hiradix/cpu"))
        return row[1 + header.index("F10")]

    assert f10_cell() == "j", "test setup: the window test is left out for an adapter without the pool"
    assert f10_cell("-k", "cites_s1") == ".", "a test -k deselected was still counted as left out by the harness"
