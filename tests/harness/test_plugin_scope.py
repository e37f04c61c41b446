"""The pytest plugin in sessions that are not about the suite: inert, cheap, and never taking another test's `impl`.

pytest loads an installed plugin in every session of its environment, so
these run real pytest processes with the plugin loaded (`-p
conformance.plugin`, as the entry point does) on tests of someone else's.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conformance.plugin import PLUGIN_NAME, SUITE_OPTION_DESTS, reaches_package

REPO = Path(__file__).resolve().parents[2]

THEIR_TESTS = '''
import sys

import pytest


@pytest.fixture
def clock():
    return "their clock"


@pytest.mark.parametrize("impl", ["a", "b"])
def test_their_impl(impl, clock):
    assert impl in ("a", "b") and clock == "their clock"
'''

NOTHING_LOADED = '''
import sys


def test_nothing_of_the_suite_was_loaded():
    loaded = sorted(m for m in sys.modules if m in ("torch", "spec", "caches") or m.startswith(("conformance.", "torch.", "caches.")))
    assert loaded == ["conformance.plugin"], loaded
'''


@pytest.fixture
def their_project(tmp_path: Path) -> Path:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_theirs.py").write_text(THEIR_TESTS)
    (tmp_path / "test_loaded.py").write_text(NOTHING_LOADED)
    return tmp_path


def test_a_session_without_the_suite_loads_nothing_and_prints_nothing(subprocess_pytest, their_project):
    result = subprocess_pytest.run(their_project, "-v", fixtures=False)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "test_their_impl[a] PASSED" in out and "test_their_impl[b] PASSED" in out and "3 passed" in out, out
    assert "conformance:" not in out and "conformance matrix" not in out, out  # no header line, no matrix


def test_their_impl_is_left_alone_while_the_suite_runs_beside_it(subprocess_pytest, their_project):
    smoke = REPO / "conformance" / "suite" / "test_smoke_roundtrip.py"
    result = subprocess_pytest.run(their_project, "-v", "-rs", "test_theirs.py", str(smoke), "--cache-impl", "caches.adapters:hiradix",
                                fixtures=False)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "test_their_impl[a] PASSED" in out and "test_their_impl[b] PASSED" in out, out
    assert "test_roundtrip_through_storage[hiradix-cpu] PASSED" in out, out
    assert "conformance: implementations hiradix" in out and "conformance matrix" in out, out


def test_importing_the_plugin_imports_nothing_heavy():
    probe = ("import sys, conformance.plugin; print(sorted(m for m in sys.modules "
             "if m.split('.')[0] in ('torch', 'numpy', 'spec', 'caches', 'conformance')))")
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['conformance', 'conformance.plugin']"


def test_help_lists_every_option(subprocess_pytest, their_project):
    result = subprocess_pytest.run(their_project, "--help", fixtures=False)
    assert result.returncode == 0, result.stderr
    for dest in SUITE_OPTION_DESTS:
        assert "--" + dest.replace("_", "-") in result.stdout, dest


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    """A checkout holding the package, and a virtual environment holding a copy of it."""
    package = tmp_path / "repo" / "conformance"
    package.mkdir(parents=True)
    venv_package = tmp_path / "repo" / "venv" / "lib" / "site-packages" / "conformance"
    venv_package.mkdir(parents=True)
    (tmp_path / "repo" / "venv" / "pyvenv.cfg").write_text("home = /usr\n")
    return package, venv_package


@pytest.mark.parametrize("arg, pyargs, reaches", [
    ("conformance", False, True),
    ("conformance/suite/test_config.py::test_unknown_policy_is_rejected[hiradix-bad0]", False, True),
    (".", False, True),  # pytest in the checkout collects the package
    ("tests", False, False),
    ("conformance", True, True),  # --pyargs conformance
    ("conformance.test_config", True, True),
    ("conformance_extra", True, False),
    ("tests/harness", False, False),
])
def test_which_arguments_run_the_suite(layout, arg, pyargs, reaches):
    package, _ = layout
    (package.parent / "tests" / "conformance").mkdir(parents=True)
    assert reaches_package(arg, package.parent, pyargs, package) is reaches


def test_a_package_inside_a_virtual_environment_is_not_collected_from_above(layout):
    _, venv_package = layout
    root = venv_package.parents[3]  # the checkout holding venv/
    assert reaches_package(".", root, False, venv_package) is False  # pytest skips virtual environments
    assert reaches_package(str(venv_package), root, False, venv_package) is True  # named directly, it runs


def test_the_entry_point_is_named_after_its_module():
    """`-p conformance.plugin` (this repository's addopts, the tests above) and the installed entry point must be one
    plugin name, or pytest refuses the second registration of the same module."""
    from conformance.plugin.expectations import _toml

    if _toml is None:
        pytest.skip("no TOML reader (Python < 3.11 without tomli)")
    project = _toml.loads((REPO / "pyproject.toml").read_text())
    assert project["project"]["entry-points"]["pytest11"] == {PLUGIN_NAME: PLUGIN_NAME}
    assert f"-p {PLUGIN_NAME}" in project["tool"]["pytest"]["ini_options"]["addopts"]


def test_what_the_xdist_controller_loads_imports_no_torch():
    """The controller loads the plugin, the suite's conftest and the adapters, but runs no test: torch stays out of it
    (every worker imports torch anyway; the controller doing it too delayed the workers' start)."""
    code = ("import sys; import conformance.plugin, conformance.plugin.fixtures, conformance.plugin.harness, conformance.plugin.recorder; "
            "from conformance.implementations.loader import load_adapters; names = [a.name for a, _ in load_adapters([])]; "
            "print(names, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == "False" and "hiradix" in out.stdout, out.stdout


def test_the_plugin_is_off_by_the_name_pytest_prints(subprocess_pytest, their_project):
    shown = subprocess_pytest.run(their_project, "--cache-impl", "caches.adapters:hiradix", "--co", fixtures=False)
    assert "conformance: implementations hiradix" in shown.stdout + shown.stderr  # a suite option: the suite runs
    off = subprocess_pytest.run(their_project, "-p", "no:hicache-conformance", "--cache-impl", "caches.adapters:hiradix", "-v", fixtures=False)
    out = off.stdout + off.stderr
    assert off.returncode == 0 and "3 passed" in out, out
    assert "conformance:" not in out and "conformance matrix" not in out, out


def test_every_suite_item_judges_an_implementation(subprocess_pytest):
    """The suite holds implementation tests only, so the report's totals are pytest's: the harness's own tests live in tests/harness."""
    result = subprocess_pytest.run(REPO, "conformance/", "--collect-only", "-q", "-p", "no:randomly", "--cache-impl", "caches.adapters:hiradix")
    items = [line for line in result.stdout.splitlines() if "::" in line]
    assert result.returncode == 0 and len(items) > 100, result.stdout[-2000:] + result.stderr[-2000:]
    outside = [item for item in items if "[hiradix-" not in item and not item.endswith("[hiradix]")]
    assert not outside, f"suite items that judge no implementation: {outside[:5]}"
