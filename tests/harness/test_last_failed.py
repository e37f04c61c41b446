"""`pytest --lf` under this repository's pytest settings reruns only what failed last time.

The settings are read from pyproject.toml ([tool.pytest.ini_options]: addopts
and cache_dir) into a generated project, so the runs see exactly what a user
in this checkout gets; testpaths are left out (they name this repository's folders).
"""

from __future__ import annotations

from pathlib import Path

import conformance.plugin  # noqa: F401 (already loaded for the in-process runs: the settings name it with -p)

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the tomli the project depends on there
    import tomli as tomllib

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[2]

TESTS = '''
def test_passes():
    pass


def test_fails():
    assert False
'''


def project_settings() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]


def test_last_failed_reruns_only_the_failures(pytester):
    settings = project_settings()
    lines = [f"addopts = {settings['addopts']!r}"] + ([f"cache_dir = {settings['cache_dir']!r}"] if "cache_dir" in settings else [])
    pytester.makepyprojecttoml("[tool.pytest.ini_options]\n" + "\n".join(lines) + "\n")
    pytester.makepyfile(test_pair=TESTS)
    first = pytester.runpytest_inprocess("-p", "no:randomly")
    first.assert_outcomes(passed=1, failed=1)
    again = pytester.runpytest_inprocess("-p", "no:randomly", "--lf", "-v")
    again.assert_outcomes(failed=1)
    assert [line.split()[0] for line in again.outlines if " FAILED" in line or " PASSED" in line] == ["test_pair.py::test_fails"]
    assert (pytester.path / settings.get("cache_dir", ".pytest_cache")).is_dir()
