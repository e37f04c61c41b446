"""The project's layout: no import cycle in any package, dependencies one way, no private name across modules.

spec depends on nothing of ours; caches on spec; conformance on spec and the
adapter protocol, never on caches (the built-in caches reach it as adapters,
through entry points); lint on libcst alone. Read with ast, so imports under
TYPE_CHECKING and inside functions count too: a cycle hidden there still
means two modules that cannot be read apart. Importing a package, or a
name from it, counts as importing its __init__; `from package import
submodule` counts as importing the submodule alone (it needs nothing the
__init__ defines).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("caches", "spec", "conformance", "lint")
# package -> the project packages it may import besides itself
ALLOWED = {"spec": set(), "caches": {"spec"}, "conformance": {"spec"}, "lint": set()}


def module_files(packages=PACKAGES) -> dict[str, Path]:
    found = {}
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def import_graph(files: dict[str, Path]) -> dict[str, set[str]]:
    graph = {}
    for name, path in files.items():
        imported: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                submodules = {f"{node.module}.{alias.name}" for alias in node.names} & files.keys()
                imported.update(submodules)
                if len(submodules) < len(node.names):
                    imported.add(node.module)
        graph[name] = {other for other in imported if other in files and other != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for other in edges:
                if other not in index:
                    index[other] = low[other] = len(index)
                    stack.append(other)
                    on_stack.add(other)
                    work.append((other, iter(sorted(graph[other]))))
                    break
                if other in on_stack:
                    low[node] = min(low[node], index[other])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_no_module_imports_one_that_imports_it_back():
    found = cycles(import_graph(module_files()))
    assert found == [], "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def project_imports(path: Path) -> list[tuple[int, str, str | None]]:
    """(line, module, name) of every import of a project package in one file (name: what `from module import name` takes)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name, None) for alias in node.names if alias.name.split(".")[0] in PACKAGES]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.split(".")[0] in PACKAGES:
            out += [(node.lineno, node.module, alias.name) for alias in node.names]
    return out


def test_dependencies_point_one_way():
    wrong = []
    for name, path in module_files().items():
        package = name.split(".")[0]
        for line, module, _ in project_imports(path):
            target = module.split(".")[0]
            if target != package and target not in ALLOWED[package]:
                wrong.append(f"{path.relative_to(ROOT)}:{line}: {package} imports {module}")
    assert wrong == [], "dependencies against the layout (spec <- caches; conformance -> spec; lint alone):\n" + "\n".join(wrong)


def test_no_private_name_crosses_a_module():
    crossing = []
    for name, path in module_files().items():
        for line, module, imported in project_imports(path):
            if imported and imported.startswith("_") and not imported.startswith("__") and module != name:
                crossing.append(f"{path.relative_to(ROOT)}:{line}: from {module} import {imported}")
    assert crossing == [], "private names imported across modules:\n" + "\n".join(crossing)


@pytest.mark.parametrize("edges, expected", [
    ({"a": {"b"}, "b": {"a"}, "c": set()}, [["a", "b"]]),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
    ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
])
def test_the_cycle_finder_finds_cycles(edges, expected):
    assert cycles(edges) == expected


def test_a_type_checking_import_back_is_a_cycle(tmp_path):
    (tmp_path / "a.py").write_text("import b\n")
    (tmp_path / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from a import thing\n")
    graph = import_graph({"a": tmp_path / "a.py", "b": tmp_path / "b.py"})
    assert cycles(graph) == [["a", "b"]]


def test_a_name_from_a_package_imports_its_init_a_submodule_does_not(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("def hook():\n    from pkg import helper\n")
    (tmp_path / "pkg" / "helper.py").write_text("")
    (tmp_path / "user.py").write_text("from pkg import helper\n")
    (tmp_path / "back.py").write_text("from pkg import hook\n")
    files = {"pkg": tmp_path / "pkg" / "__init__.py", "pkg.helper": tmp_path / "pkg" / "helper.py",
             "user": tmp_path / "user.py", "back": tmp_path / "back.py"}
    graph = import_graph(files)
    assert graph["user"] == {"pkg.helper"} and graph["back"] == {"pkg"}
    (tmp_path / "pkg" / "helper.py").write_text("from pkg import hook\n")  # the submodule needs the __init__'s name: a cycle
    assert cycles(import_graph(files)) == [["pkg", "pkg.helper"]]


# The pytest layer of conformance/: the plugin and the conftest files that load it. Everything else in
# conformance/ is library code the plugin imports, never the reverse (as pytest-xdist keeps its own).
PYTEST_LAYER = ("conformance.plugin", "conformance.suite.conftest")
MAX_MODULE_LINES = 650


def in_pytest_layer(name: str) -> bool:
    return any(name == layer or name.startswith(layer + ".") for layer in PYTEST_LAYER)


def test_nothing_below_the_plugin_imports_it():
    wrong = [f"{path.relative_to(ROOT)}:{line}: imports {module}"
             for name, path in module_files(("conformance",)).items() if not in_pytest_layer(name)
             for line, module, _ in project_imports(path) if in_pytest_layer(module)]
    assert wrong == [], ("library code importing the pytest plugin (move what it needs to "
                         "conformance/implementations/ or another library package):\n" + "\n".join(wrong))


def test_the_layer_rule_sees_an_import_of_the_plugin(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("def f():\n    from conformance.plugin.harness import build_harness\n")
    assert [m for _, m, _ in project_imports(sample) if in_pytest_layer(m)] == ["conformance.plugin.harness"]
    assert not in_pytest_layer("conformance.plugins_elsewhere") and in_pytest_layer("conformance.plugin")


def test_no_module_is_over_the_size_limit():
    long = [f"{path.relative_to(ROOT)}: {n} lines" for path in module_files().values()
            if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES]
    assert long == [], f"modules over {MAX_MODULE_LINES} lines (split by job):\n" + "\n".join(long)
