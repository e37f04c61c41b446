"""The conformance suite as a pytest plugin: its options, and the harness of a session that runs the suite.

Installed with the package (entry point `conformance.plugin` in the `pytest11`
group), so `pytest --pyargs conformance --cache-impl my_pkg:factory` works
from any directory. pytest loads it in every session of the environment, so
it stays inert: importing it imports neither torch nor an adapter, and a
session that does not run the suite only sees its options. A session runs the
suite (suite_requested) when

- a conformance option is given (`--cache-impl`, `--sglang`, `--sglang-shim`,
  `--sglang-live`, `--conformance-report`, `--conformance-repro`,
  `--expected-failures`, `--clause`), or
- a collection argument is the conformance package, lies inside it or holds
  it (`pytest conformance/`, `pytest --pyargs conformance`, `pytest` in this
  repository, whose testpaths include it), or
- `conformance.plugin.fixtures` is registered as a plugin (a project's own
  conformance tests: `pytest_plugins = ["conformance.plugin.fixtures"]`).

Only then are the options checked and the adapters loaded (a bad value is a
one-line usage error before collection: conformance/plugin/options.py), and
the process that sees every report (the xdist controller, or the only
process) records the matrix (conformance/plugin/recorder.py). The fixtures and the
per-test hooks (parametrization over adapters and devices, the clause check)
are in conformance/plugin/fixtures.py, which conformance/suite/conftest.py applies to the
package's own tests only: a test elsewhere that takes a parameter named
`impl` is left alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

PLUGIN_NAME = "conformance.plugin"  # the pytest11 entry point's name: `-p conformance.plugin` never loads it twice
DISTRIBUTION_NAME = "hicache-conformance"  # what pytest's header prints: `-p no:hicache-conformance` turns the plugin off too
FIXTURES_PLUGIN = "conformance.plugin.fixtures"
PACKAGE_DIR = Path(__file__).resolve().parents[1]  # the conformance package
# The options' dests: giving any of them asks for the suite.
SUITE_OPTION_DESTS = ("cache_impl", "conformance_report", "conformance_repro", "sglang", "sglang_shim", "expected_failures", "sglang_live",
                      "clause")

_HARNESS = pytest.StashKey[Any]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("conformance", "hicache-conformance suite (active only for runs of the suite)")
    group.addoption("--cache-impl", action="append", default=[], metavar="MODULE:FACTORY",
                    help="run this adapter (repeatable) instead of the registered entry points")
    group.addoption("--conformance-report", default=None, metavar="PATH",
                    help="write the conformance report as PATH.json, PATH.md and PATH.html (PATH is a prefix, not a folder)")
    group.addoption("--conformance-repro", default=None, metavar="DIR",
                    help="write into the folder DIR (created if missing) one standalone script per defect entry "
                         "that replays it (its smallest case) on the implementation")
    group.addoption("--clause", action="append", default=[], metavar="ID[,ID...]",
                    help="run only the tests citing these spec clauses (repeatable); `-k D3` also selects by clause")
    group.addoption("--sglang", default=None, metavar="PATH",
                    help="also run SGLang's own decision code, read from the checkout at PATH (its root), as sglang:hiradix, sglang:unified_radix, sglang:hi_mamba_radix")
    group.addoption("--sglang-shim", default=None, metavar="MODULE:FACTORY",
                    help="the factory turning --sglang PATH into adapters (default: the 'sglang' entry point of hicache_conformance.checkout_adapters)")
    group.addoption("--expected-failures", action="append", default=[], metavar="PATH",
                    help="TOML file of [[xfail]] entries (test, reason, optional clause and impl; impl defaults to the file's stem); repeatable")
    group.addoption("--sglang-live", action="append", default=[], metavar="PATH[@LABEL]",
                    help="also run SGLang's own cache classes, built on CPU from the SGLang tree at PATH "
                         "(a checkout, an unpacked wheel or a site-packages; environment: bash .ci/sglang-live-env VENV)")


def _arg_path(arg: str) -> str:
    """'conformance/suite/test_x.py::test_y[p]' -> 'conformance/suite/test_x.py'."""
    return arg.split("::", 1)[0]


def _holds_collectable(root: Path, package: Path) -> bool:
    """Whether collecting `root` would reach `package` below it (pytest skips hidden folders and virtual environments)."""
    between = package.relative_to(root).parts[:-1]
    folder = root
    for part in between:
        folder = folder / part
        if part.startswith(".") or part in ("site-packages", "dist-packages") or (folder / "pyvenv.cfg").is_file():
            return False
    return True


def reaches_package(arg: str, invocation_dir: Path, pyargs: bool, package: Path = PACKAGE_DIR) -> bool:
    """Whether collecting one command-line argument collects tests of the conformance package."""
    target = _arg_path(arg)
    if pyargs and (target == package.name or target.startswith(package.name + ".")):
        return True
    path = Path(invocation_dir, target).resolve()
    if path == package or package in path.parents:
        return True
    return path in package.parents and _holds_collectable(path, package)


def suite_requested(config: pytest.Config) -> bool:
    if any(config.getoption(dest, None) for dest in SUITE_OPTION_DESTS):
        return True
    if config.pluginmanager.has_plugin(FIXTURES_PLUGIN):
        return True
    invocation_dir = Path(config.invocation_params.dir)
    pyargs = bool(config.getoption("pyargs", False))
    return any(reaches_package(str(arg), invocation_dir, pyargs) for arg in config.args)


@pytest.hookimpl(tryfirst=True)  # pin the worker's GPU before any other plugin could touch CUDA
def pytest_configure(config: pytest.Config) -> None:
    if disabled(config):
        return  # `-p no:hicache-conformance`: the name pytest's header shows for this plugin
    if suite_requested(config) and not config.getoption("help", False):  # --help needs no adapter
        start_harness(config)


def disabled(config: pytest.Config) -> bool:
    """Whether the session blocked this plugin by its distribution's name (what pytest prints under "plugins:")."""
    return config.pluginmanager.is_blocked(DISTRIBUTION_NAME)


def start_harness(config: pytest.Config) -> Any:
    """Load the adapters and, in the process that sees every report, register the matrix recorder."""
    if disabled(config):
        raise pytest.UsageError(f"the conformance suite's tests were collected with its plugin disabled (-p no:{DISTRIBUTION_NAME}); "
                                "drop that option, or leave the conformance package out of the run")
    import time

    from conformance.implementations import devices
    from conformance.plugin.harness import build_harness
    from conformance.plugin.options import check_options
    from conformance.plugin.recorder import RECORDER_NAME, MatrixRecorder
    from conformance.plugin.watchdog import WATCHDOG_NAME, Watchdog

    from conformance.bounds import time_scale
    from spec.errors import ConfigError

    try:
        time_scale()  # a bad scale is a usage error now, not a surprise in the first wait
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from None
    check_options(config)
    started = time.time()
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        devices.pin_worker_gpu(workerinput["workerid"])  # before anything initializes CUDA in this worker
    harness = build_harness(config)
    config.stash[_HARNESS] = harness
    if not config.pluginmanager.has_plugin(WATCHDOG_NAME):
        config.pluginmanager.register(Watchdog(), WATCHDOG_NAME)
    if workerinput is None:
        config.pluginmanager.register(MatrixRecorder(harness, config, started=started), RECORDER_NAME)
    return harness


def harness_of(config: pytest.Config) -> Any:
    """The session's harness; started now if the suite's tests are collected in a session suite_requested missed."""
    harness = config.stash.get(_HARNESS, None)
    return harness if harness is not None else start_harness(config)


def active_harness(config: pytest.Config) -> Any:
    """The session's harness, or None when the session does not run the suite."""
    return config.stash.get(_HARNESS, None)


def pytest_report_header(config: pytest.Config) -> list[str]:
    harness = active_harness(config)
    return harness.header_lines(config) if harness is not None else []


def pytest_itemcollected(item: pytest.Item) -> None:
    if active_harness(item.config) is not None:
        from conformance.plugin.options import add_clause_keywords

        add_clause_keywords(item)


def pytest_deselected(items: list[pytest.Item]) -> None:
    # A test -k, -m or --clause left out was still collected: an expected failure matching it is not stale.
    harness = active_harness(items[0].config) if items else None
    if harness is not None:
        harness.note_collected(items)


@pytest.hookimpl(trylast=True)  # after -k/-m deselect: a test they dropped is not listed as left out by the harness
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    harness = active_harness(config)
    if harness is not None:
        from conformance.plugin.options import keep_selected_clauses

        keep_selected_clauses(config, items)
        harness.mark_items(config, items)

