"""Applies one mutant at import time, in every process of a run, without touching the file on disk.

A campaign runs the suite with a folder holding a `sitecustomize.py` at
the front of PYTHONPATH and HICACHE_MUTANT naming a JSON record (module,
file, mutated source). Python imports `sitecustomize` at start-up in every
interpreter that inherits the environment: the pytest process, each xdist
worker, the forkserver the multi-rank tests start ranks from, and spawned
ranks. Each installs the finder below first on sys.meta_path; when the
mutated module is imported, the finder asks the other finders for its spec
and, if it is the recorded file, loads the mutated source compiled under
the file's own name (tracebacks point at the real file and line; nothing
is written to __pycache__). A forked rank inherits the mutated module.

pytest puts its own finder first when it starts; the campaign's plugin
(first_failure.py) puts this one back in front (take_precedence).

Each process that executes the mutated module leaves `applied.<pid>` next
to the record; one whose module raised while executing leaves
`stillborn.<pid>` with the error, and re-raises it.

Standard library only, and loaded by file path: the hook must not import
this project's packages before the run imports them itself.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import sys
from pathlib import Path
from typing import Any, Sequence

MUTANT_ENV = "HICACHE_MUTANT"
APPLIED = "applied"
STILLBORN = "stillborn"


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


class MutantLoader(importlib.machinery.SourceFileLoader):
    def __init__(self, fullname: str, path: str, source: str, markers: str) -> None:
        super().__init__(fullname, path)
        self._source = source
        self._markers = markers

    def get_source(self, fullname: str) -> str:
        return self._source

    def get_code(self, fullname: str) -> Any:
        # Compiled from the mutated text under the real file name; no bytecode cache is read or written.
        return compile(self._source, self.path, "exec", dont_inherit=True)

    def exec_module(self, module: Any) -> None:
        try:
            super().exec_module(module)
        except BaseException as exc:
            _mark(self._markers, STILLBORN, f"{type(exc).__name__}: {exc}")
            raise
        _mark(self._markers, APPLIED, module.__name__)


class MutantFinder(importlib.abc.MetaPathFinder):
    def __init__(self, module: str, path: str, source: str, markers: str) -> None:
        self.module, self.path, self.source, self.markers = module, path, source, markers

    def find_spec(self, fullname: str, path: Sequence[str] | None = None, target: Any = None) -> Any:
        if fullname != self.module:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is None:
                continue
            if spec.origin and _same_file(spec.origin, self.path):
                spec.loader = MutantLoader(fullname, spec.origin, self.source, self.markers)
            return spec
        return None


def _mark(folder: str, kind: str, text: str) -> None:
    with open(os.path.join(folder, f"{kind}.{os.getpid()}"), "a", encoding="utf-8") as out:
        out.write(text.replace("\n", " ") + "\n")


def install(record_path: str) -> MutantFinder:
    record = json.loads(Path(record_path).read_text(encoding="utf-8"))
    finder = MutantFinder(record["module"], record["file"], record["source"], os.path.dirname(os.path.abspath(record_path)))
    sys.meta_path.insert(0, finder)
    return finder


def take_precedence() -> None:
    """Put this process's mutant finder back in front of sys.meta_path.

    pytest inserts its assertion-rewriting hook in front at start-up, and it
    claims every module of a distribution that declares a pytest plugin
    (this one does, so an implementation in the same distribution would be
    loaded by it, unmutated); the campaign's pytest plugin calls this when
    pytest loads it, before any implementation module is imported.
    """
    ours = [f for f in sys.meta_path if type(f).__name__ == MutantFinder.__name__ and hasattr(f, "source")]
    for finder in ours:
        sys.meta_path.remove(finder)
    sys.meta_path[:0] = ours


def install_from_environment() -> None:
    record = os.environ.get(MUTANT_ENV)
    if record:
        install(record)


def write_record(folder: Path, *, module: str, file: str, source: str) -> Path:
    """The record a run's processes read (folder: the run's own, where the markers appear)."""
    path = folder / "mutant.json"
    path.write_text(json.dumps({"module": module, "file": file, "source": source}), encoding="utf-8")
    return path


def markers(folder: Path, kind: str) -> list[str]:
    """One entry per process that left a marker of this kind: its lines joined."""
    return [p.read_text(encoding="utf-8").strip() for p in sorted(folder.glob(f"{kind}.*"))]


SITECUSTOMIZE = '''\
# Written by conformance.mutants for one run: applies the mutant named by {env} in this process.
import importlib.util as _util
import os as _os
import sys as _sys

_spec = _util.spec_from_file_location("_hicache_mutant_hook", {hook!r})
_hook = _util.module_from_spec(_spec)
_spec.loader.exec_module(_hook)
_hook.install_from_environment()

# This file shadows any other sitecustomize on the path: run that one too.
_here = _os.path.dirname(_os.path.abspath(__file__))
_path, _sys.path[:] = list(_sys.path), [p for p in _sys.path if _os.path.abspath(p or ".") != _here]
_this = _sys.modules.pop("sitecustomize", None)
try:
    import sitecustomize  # noqa: F401
except ImportError as _exc:
    _sys.modules["sitecustomize"] = _this  # none other: the import that runs this file returns this module
    if _exc.name != "sitecustomize":
        raise
finally:
    _sys.path[:] = _path
'''


def write_site(folder: Path) -> Path:
    """A folder to put first on PYTHONPATH: its sitecustomize installs the hook from the environment."""
    site = folder / "site"
    site.mkdir(parents=True, exist_ok=True)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE.format(env=MUTANT_ENV, hook=str(Path(__file__).resolve())), encoding="utf-8")
    return site
