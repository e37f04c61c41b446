"""One error root per package: every exception class a package defines derives from that package's root,
so a caller catches everything a package raises on purpose with one except clause."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest

from conformance.errors import ConformanceError
from lint.errors import LintError
from spec.errors import CacheError

ROOT = Path(__file__).resolve().parents[1]
# package -> the roots its own exception classes may derive from
ROOTS = {
    "spec": (CacheError,),
    "caches": (CacheError,),
    "conformance": (ConformanceError, CacheError),  # CacheError: a bad input to the harness is spec's ConfigError
    "lint": (LintError,),
}


def package_modules(package: str) -> list[str]:
    names = []
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__main__" or parts[:2] == ("conformance", "suite"):  # a command line runs on import; the suite's
            continue  # test modules need the plugin's markers (and define no exception)
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def defined_exceptions(module_name: str) -> list[type]:
    module = importlib.import_module(module_name)
    return [value for value in vars(module).values()
            if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == module_name]


@pytest.mark.parametrize("package", sorted(ROOTS))
def test_every_exception_a_package_defines_derives_from_its_root(package):
    stray = [f"{cls.__module__}.{cls.__qualname__} ({', '.join(b.__name__ for b in cls.__mro__[1:-2])})"
             for name in package_modules(package) for cls in defined_exceptions(name)
             if not issubclass(cls, ROOTS[package])]
    roots = " or ".join(r.__name__ for r in ROOTS[package])
    assert stray == [], f"exception classes in {package}/ outside {roots}:\n" + "\n".join(stray)


def test_the_check_finds_a_stray_exception(tmp_path, monkeypatch):
    (tmp_path / "stray_errors_sample.py").write_text("class Loose(RuntimeError):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    [loose] = defined_exceptions("stray_errors_sample")
    assert not issubclass(loose, ROOTS["conformance"])


def test_a_finding_is_an_assertion_and_an_injected_fault_an_os_error():
    from conformance.gates import GateTimeout, InjectedFault

    assert issubclass(GateTimeout, AssertionError) and issubclass(InjectedFault, OSError)
    assert issubclass(GateTimeout, ConformanceError) and issubclass(InjectedFault, ConformanceError)
