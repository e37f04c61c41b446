"""The linter's own import graph: no cycle, nothing outside lint, libcst, the
standard library and tomli, no private name taken from another module, and
libcst loaded only once a file holds a candidate method."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

LINT = Path(__file__).resolve().parents[2] / "lint"
ALLOWED = {"lint", "libcst", "tomli"} | set(sys.stdlib_module_names)


def modules() -> dict[str, Path]:
    out = {}
    for path in LINT.rglob("*.py"):
        parts = list(path.relative_to(LINT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports(name: str, path: Path) -> list[tuple[str, list[str]]]:
    """(module, names taken from it) for every import in the file, relative ones resolved."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.extend((alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.append((module, [alias.name for alias in node.names]))
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    edges: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        for module, names in imports(name, path):
            for target in [f"{module}.{n}" for n in names] + [module]:
                if target in known and target != name:
                    edges[name].add(target)
                    break
    return edges


def cycle(edges: dict[str, set[str]]) -> list[str]:
    """One import cycle, as the modules on it; [] when there is none."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        state[node] = 2
        stack.pop()
        return []

    for start in sorted(edges):
        if start not in state:
            found = visit(start)
            if found:
                return found
    return []


def test_the_cycle_finder_finds_one():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) == []


def test_lint_has_no_import_cycle():
    edges = graph()
    assert sum(len(targets) for targets in edges.values()) > 40  # the graph was read
    assert cycle(edges) == []


def test_lint_imports_only_lint_libcst_the_standard_library_and_tomli():
    outside = {(name, module) for name, path in modules().items() for module, _ in imports(name, path)
               if module.split(".")[0] not in ALLOWED}
    assert outside == set()


def test_no_private_name_crosses_a_module():
    crossing = {(name, f"{module}.{n}") for name, path in modules().items()
                for module, names in imports(name, path) if module.startswith("lint")
                for n in names if n.startswith("_") and not n.startswith("__")}
    assert crossing == set()


def test_the_cli_loads_libcst_only_for_a_candidate_method(tmp_path):
    (tmp_path / "plain.py").write_text("def f():\n    return 1\n")
    probe = ("import sys, runpy; sys.argv = ['hicache-lint'] + sys.argv[1:]\n"
             "try:\n    runpy.run_module('lint', run_name='__main__')\n"
             "except SystemExit:\n    pass\n"
             "print('libcst' in sys.modules, file=sys.stderr)")
    for args, loaded in ((["--version"], "False"), (["plain.py"], "False"), (["--list-rules"], "False")):
        proc = subprocess.run([sys.executable, "-c", probe, *args], cwd=tmp_path, capture_output=True, text=True,
                              env={"PYTHONPATH": str(LINT.parent)}, timeout=60)
        assert proc.stderr.splitlines()[-1] == loaded, (args, proc.stderr)
    (tmp_path / "cache.py").write_text("class C:\n    def can_terminate_prefetch(self, op):\n        return True\n")
    proc = subprocess.run([sys.executable, "-c", probe, "cache.py"], cwd=tmp_path, capture_output=True, text=True,
                          env={"PYTHONPATH": str(LINT.parent)}, timeout=60)
    assert proc.stderr.splitlines()[-1] == "True", proc.stderr
