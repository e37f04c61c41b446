"""Discovery on the built-in adapters finds their protocol code, and only protocol code; mutation_targets overrides it."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from caches.adapters import hi_mamba_radix, hiradix, unified_radix
from conformance.mutants.catalogue import mutants_of
from conformance.mutants.discovery import adapter_targets
from spec.errors import ConfigError

# (module, function) -> role, for every part of the protocol the issue names: what each cache must expose.
SHARED = {
    ("caches.core.operation", "PrefetchOperation.terminate"): "terminate",
    ("caches.core.operation", "PrefetchOperation.progress"): "snapshot",
    ("caches.core.operation", "PrefetchOperation.begin_io"): "io_start",
    ("caches.core.operation", "PrefetchOperation.end_io"): "io_end",
    ("caches.core.controller", "StorageController._load"): "io_thread",
    ("caches.core.controller", "StorageController._load_extras"): "io_thread",
    ("caches.core.commit", "PrefetchCommit.commit"): "commit",
    ("caches.core.reducer", "TorchDistReducer._reduce"): "combine",
    ("caches.core.copies", "CopyTracker.free"): "copy_free",
    ("caches.core.eviction", "Eviction.drop_device"): "eviction",
    ("caches.core.tree", "RadixTree.pin_host"): "eviction",
    ("caches.storage.file_backend", "FileStorage._verify"): "integrity",
    ("caches.storage.namespace", "StorageNamespace.describe"): "namespace",
}
OWN = {
    "hiradix": {("caches.hiradix", "HiRadixCache.can_terminate_prefetch"): "decision"},
    "unified_radix": {("caches.unified_radix", "UnifiedRadixCache.can_terminate_prefetch"): "decision"},
    "hi_mamba_radix": {("caches.hi_mamba_radix", "HiMambaRadixCache.can_terminate_prefetch"): "decision",
                       ("caches.hi_mamba_radix", "HiMambaRadixCache._prefetch_budget_s"): "timeout"},
}


@pytest.fixture(scope="module")
def discovered():
    return {factory().name: adapter_targets(factory(), "caches.adapters") for factory in (hiradix, unified_radix, hi_mamba_radix)}


@pytest.mark.parametrize("name", sorted(OWN))
def test_finds_the_protocol_functions_of_each_cache(discovered, name):
    found = {(t.module, t.qualname): t.role.name for t in discovered[name]}
    for key, role in {**SHARED, **OWN[name]}.items():
        assert found.get(key) == role, f"{name}: {key} found as {found.get(key)}, expected {role}"


@pytest.mark.parametrize("name", sorted(OWN))
def test_never_targets_the_harness_the_spec_or_other_caches_decisions(discovered, name):
    modules = {t.module for t in discovered[name]}
    assert not {m for m in modules if m.split(".")[0] in ("spec", "conformance", "lint", "torch")}
    others = {"caches.hiradix", "caches.unified_radix", "caches.hi_mamba_radix"} - {f"caches.{name}"}
    assert not modules & others
    assert not [t for t in discovered[name] if t.qualname.endswith(("__init__", "__repr__"))]


def test_every_mutant_of_a_cache_is_one_change(discovered):
    mutants = mutants_of(discovered["hiradix"])
    assert len({m.id for m in mutants}) == len(mutants)
    operators = {m.operator for m in mutants}
    assert {"drop_lock", "drop_recheck", "reduce_swap", "remove_assign_guard", "clamp_one_pool", "page_plus_one", "free_before_io_end"} <= operators
    for m in mutants:
        hunks = m.diff.count("\n@@ ")
        assert hunks == 1 or (m.operator == "free_before_io_end" and hunks == 2), m.id  # a move shows where it left and arrived
        compile(m.source, m.file, "exec")


@dataclass(frozen=True)
class DeclaringAdapter:
    mutation_targets: tuple
    name: str = "declaring"
    capabilities: frozenset = frozenset()
    default_extra_pools: tuple = ()

    def create(self, env):  # discovery must not build an instance when targets are declared
        raise AssertionError("create() called")


def test_mutation_targets_override_discovery():
    targets = adapter_targets(DeclaringAdapter(("caches.hiradix:HiRadixCache.can_terminate_prefetch", "caches.core.commit")), "x")
    names = [(t.module, t.qualname, t.role.name) for t in targets]
    assert names[0] == ("caches.hiradix", "HiRadixCache.can_terminate_prefetch", "decision")
    assert ("caches.core.commit", "PrefetchCommit.commit", "commit") in names
    assert ("caches.core.commit", "PrefetchCommit.__init__", "declared") in names  # a declared module: every function


@pytest.mark.parametrize("declared, says", [
    (("caches.hiradix:HiRadixCache.no_such_method",), "a function of caches.hiradix"),
    (("no_such_package.module",), "an importable module"),
    ("caches.hiradix", "a non-empty list"),
])
def test_bad_mutation_targets_are_one_line(declared, says):
    with pytest.raises(ConfigError) as caught:
        adapter_targets(DeclaringAdapter(declared), "x")
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_the_package_imports_no_implementation_and_not_the_linter():
    import ast
    from pathlib import Path

    import conformance.mutants

    for path in sorted(Path(conformance.mutants.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not [n for n in names if n.split(".")[0] in ("caches", "lint")], f"{path.name} imports {names}"
