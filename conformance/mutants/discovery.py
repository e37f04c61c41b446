"""Which functions of an implementation are its protocol code: the targets a campaign mutates.

Without a declaration, discovery builds one instance through the adapter
(a CPU cache, as the suite does), walks the objects it is made of (the
instance, its attributes, their classes and base classes, class-valued
attributes such as an operation class, the callbacks it holds), and keeps
the modules those come from, together with the modules they import from
the same top-level packages. In those modules it keeps the functions the
protocol vocabulary names (conformance/mutants/roles.py).

The harness, the spec (the oracle) and third-party and standard-library
modules are never targets: mutating the judge proves nothing.

An adapter may instead declare `mutation_targets`: module names (every
function in the module) or "module:Class.method" / "module:function".
Nothing here imports an implementation except through its adapter; its
source files are read as text.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
import tempfile
import types
from collections import deque
from pathlib import Path
from typing import Any, Iterable, Sequence

from conformance.adapter import CacheEnv
from conformance.mutants.roles import DECLARED, Target, role_of
from spec.clock import ManualClock
from spec.config import TerminationConfig
from spec.errors import ConfigError
from spec.trace import TraceRecorder

# Never targets: this suite, its oracle, and the libraries every implementation runs on.
NOT_TARGETS = frozenset({"spec", "conformance", "lint", "torch", "numpy", "pytest", "_pytest", "pluggy", "xdist", "execnet",
                         "libcst", "typing_extensions", "builtins"})
_WALK_LIMIT = 100_000  # objects visited at most: a cache's graph is a few thousand (slot lists hold plain ints)
_LEAVES = (int, float, complex, str, bytes, bool, type(None))


def is_candidate_module(name: str) -> bool:
    top = name.split(".")[0]
    return bool(top) and top not in NOT_TARGETS and top not in sys.stdlib_module_names and not top.startswith("_")


def adapter_targets(adapter: Any, factory_module: str) -> list[Target]:
    """The adapter's declared mutation_targets, else the protocol functions of the modules its instances are built from."""
    declared = getattr(adapter, "mutation_targets", None)
    if declared is not None:
        return declared_targets(declared, f"{getattr(adapter, 'name', '?')} mutation_targets")
    modules = import_closure(built_modules(adapter) | ({factory_module} if is_candidate_module(factory_module) else set()))
    return protocol_functions(sorted(modules))


def declared_targets(declared: Any, field: str) -> list[Target]:
    if isinstance(declared, str) or not isinstance(declared, (list, tuple)) or not declared:
        raise ConfigError(field, declared, "a non-empty list of 'package.module' or 'package.module:Class.method'")
    targets: list[Target] = []
    for entry in declared:
        if not isinstance(entry, str) or entry.count(":") > 1 or not entry.split(":")[0]:
            raise ConfigError(field, entry, "'package.module' or 'package.module:Class.method'")
        module, _, qualname = entry.partition(":")
        file = module_file(module, field)
        functions = _function_names(file)
        if qualname and qualname not in functions:
            raise ConfigError(field, entry, f"a function of {module} ({', '.join(sorted(functions)[:8])}{', ...' if len(functions) > 8 else ''})")
        for name in [qualname] if qualname else sorted(functions):
            targets.append(Target(module, file, name, role_of(name) or DECLARED))
    return targets


def module_file(module: str, field: str) -> str:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError) as exc:
        raise ConfigError(field, module, f"an importable module ({type(exc).__name__}: {exc})") from None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        raise ConfigError(field, module, "a module with a Python source file")
    return spec.origin


def protocol_functions(modules: Iterable[str]) -> list[Target]:
    targets = []
    for module in modules:
        file = getattr(sys.modules.get(module), "__file__", None) or module_file(module, "module")
        if not file.endswith(".py"):
            continue
        for name in sorted(_function_names(file)):
            role = role_of(name)
            if role is not None:
                targets.append(Target(module, file, name, role))
    return targets


def _function_names(file: str) -> set[str]:
    from conformance.mutants.catalogue import functions_of  # libcst is loaded only where mutants are made

    return set(functions_of(Path(file).read_text(encoding="utf-8")))


# --- the modules an instance is built from -------------------------------------------------------


def built_modules(adapter: Any) -> set[str]:
    """Modules of everything one instance of the adapter's cache is made of (it is created on the CPU and closed)."""
    with tempfile.TemporaryDirectory(prefix="mutants-discovery-") as tmp:
        clock = ManualClock(0.0)
        env = CacheEnv(device="cpu", termination=TerminationConfig(policy="wait_complete", page_size=4),
                       storage_dir=Path(tmp) / "storage", clock=clock, trace=TraceRecorder(clock),
                       extra_pools=tuple(adapter.default_extra_pools))
        session = adapter.create(env)
        try:
            return reachable_modules([adapter, session])
        finally:
            session.close()


def reachable_modules(roots: Sequence[Any]) -> set[str]:
    """Candidate modules of the classes (with their bases) of every object reachable from `roots`."""
    modules: set[str] = set()
    seen: set[int] = set()
    queue: deque[Any] = deque(roots)
    while queue and len(seen) < _WALK_LIMIT:
        obj = queue.popleft()
        if isinstance(obj, _LEAVES) or id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, type):
            for base in obj.__mro__:
                if is_candidate_module(base.__module__):
                    modules.add(base.__module__)
                    queue.extend(v for v in vars(base).values() if isinstance(v, type))
            continue
        queue.append(type(obj))
        if isinstance(obj, (list, tuple, set, frozenset)):
            queue.extend(obj)
        elif isinstance(obj, dict):
            queue.extend(obj.keys())
            queue.extend(obj.values())
        elif isinstance(obj, types.MethodType):
            queue.extend((obj.__self__, obj.__func__))
        elif isinstance(obj, types.FunctionType):
            if is_candidate_module(obj.__module__ or ""):
                modules.add(obj.__module__)
            queue.extend(cell.cell_contents for cell in obj.__closure__ or () if _filled(cell))
        elif is_candidate_module(type(obj).__module__):  # inside objects of ours only: not torch's or threading's
            queue.extend(getattr(obj, "__dict__", {}).values())
            for slot in getattr(type(obj), "__slots__", ()):
                if hasattr(obj, slot):
                    queue.append(getattr(obj, slot))
    return modules


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents
    except ValueError:  # an empty cell
        return False
    return True


def import_closure(modules: set[str]) -> set[str]:
    """`modules` plus what they import, transitively, from their own top-level packages."""
    tops = {m.split(".")[0] for m in modules}
    found, queue = set(), deque(sorted(modules))
    while queue:
        module = queue.popleft()
        if module in found:
            continue
        found.add(module)
        for imported in _imports(module):
            if imported.split(".")[0] in tops and imported not in found and _importable(imported):
                queue.append(imported)
    return found


def _imports(module: str) -> list[str]:
    file = getattr(sys.modules.get(module), "__file__", None)
    if not file or not file.endswith(".py"):
        return []
    tree = ast.parse(Path(file).read_text(encoding="utf-8"))
    package = module if Path(file).name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package.split(".")[: len(package.split(".")) - node.level + 1], *([base] if base else [])])
            out.append(base)
            out.extend(f"{base}.{alias.name}" for alias in node.names)  # `from pkg import module`
    return out


def _importable(module: str) -> bool:
    if module in sys.modules:
        return True
    try:
        importlib.import_module(module)
    except Exception:  # `from pkg import name` where name is no module: not one to follow
        return False
    return True
