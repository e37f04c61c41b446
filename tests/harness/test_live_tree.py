"""Finding SGLang in what a user passes to --sglang-live, on hand-written trees of our own (no upstream code)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.live.adapter import adapters_for
from conformance.live.plugin import live_trees
from conformance.live.tree import locate, parse_option
from spec.errors import ConfigError

HIRADIX = "class HiRadixCache(RadixCache):\n    pass\n"
HI_MAMBA = "class HiMambaRadixCache(MambaRadixCache):\n    pass\n"
NO_HI_MAMBA = "HiMambaRadixCache: sglang/srt/mem_cache/hi_mamba_radix_cache.py does not exist"
NO_UNIFIED = "UnifiedRadixCache: sglang/srt/mem_cache/unified_radix_cache.py does not exist"
# The files that tell 0.5.2x's layout (tree core, runtime context) from the fork's earlier UnifiedRadixCache.
UNIFIED_LAYOUT = ("srt/mem_cache/unified_cache/unified_tree_core.py", "srt/runtime_context.py")


def sglang_package(root: Path, *, hiradix: str | None = HIRADIX, version: str | None = None, unified: bool = False,
                   hi_mamba: bool = False, unified_layout: bool = False, unified_mamba: bool = False) -> Path:
    """A minimal upstream-shaped sglang package under root; returns the package directory."""
    package = root / "sglang"
    mem_cache = package / "srt" / "mem_cache"
    mem_cache.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    if hiradix is not None:
        (mem_cache / "hiradix_cache.py").write_text(hiradix)
    if hi_mamba:
        (mem_cache / "hi_mamba_radix_cache.py").write_text(HI_MAMBA)
    if unified:
        (mem_cache / "unified_radix_cache.py").write_text("class UnifiedRadixCache(BasePrefixCache):\n    pass\n")
    for rel in UNIFIED_LAYOUT if unified_layout else ():
        (package / rel).parent.mkdir(parents=True, exist_ok=True)
        (package / rel).write_text("")
    if unified_layout:  # 0.5.22+: the drain allocates a hit through the controller
        controller = package / "srt" / "mem_cache" / "hybrid_cache" / "hybrid_cache_controller.py"
        controller.parent.mkdir(parents=True, exist_ok=True)
        controller.write_text("class HybridCacheController:\n    def allocate_storage_hit(self, operation, hit_tokens):\n        pass\n")
    if unified_mamba:  # the unified assembler builds a hybrid mamba model's host stack
        assembler = package / "srt" / "mem_cache" / "hybrid_cache" / "hybrid_pool_assembler.py"
        assembler.parent.mkdir(parents=True, exist_ok=True)
        assembler.write_text("class StackStrategy:\n    pass\n\n\nclass _MambaStrategy(StackStrategy):\n    pass\n")
    if version is not None:
        (package / "version.py").write_text(f'__version__ = "{version}"\n')
    return package


def test_checkout_layout_imports_from_python_dir(tmp_path):
    sglang_package(tmp_path / "python", version="0.5.9", hi_mamba=True)
    tree = locate(str(tmp_path))
    assert tree.import_root == tmp_path / "python"
    assert tree.layouts == ("HiRadixCache", "HiMambaRadixCache") and tree.missing == (NO_UNIFIED,)
    assert tree.label == "0.5.9"


def test_wheel_or_site_packages_layout(tmp_path):
    sglang_package(tmp_path, hiradix=None, unified=True, unified_layout=True)
    (tmp_path / "sglang-0.5.23.dist-info").mkdir()
    tree = locate(str(tmp_path))
    assert tree.import_root == tmp_path and tree.label == "0.5.23"
    assert tree.layouts == ("UnifiedRadixCache",)
    assert tree.unwired == ("UnifiedRadixCache+dsa (UnifiedRadixCache) is in the tree but not in the 0.5.22+ DSA build the harness "
                            "is wired to (sglang/srt/mem_cache/memory_pool.py does not exist)",
                            "UnifiedRadixCache+dsa/inline (UnifiedRadixCache) is in the tree but not in the 0.5.20/0.5.21 DSA build the "
                            "harness is wired to (sglang/srt/mem_cache/hybrid_cache/hybrid_cache_controller.py has the "
                            "allocate_storage_hit of the 0.5.22+ drain)",
                            "UnifiedRadixCache+mamba (UnifiedRadixCache) is in the tree but not in the 0.5.22+ mamba build the harness "
                            "is wired to (sglang/srt/mem_cache/hybrid_cache/hybrid_pool_assembler.py does not exist)",
                            "UnifiedRadixCache+mamba/inline (UnifiedRadixCache) is in the tree but not in the 0.5.20/0.5.21 mamba build "
                            "the harness is wired to (sglang/srt/mem_cache/hybrid_cache/hybrid_cache_controller.py has the "
                            "allocate_storage_hit of the 0.5.22+ drain)",
                            "UnifiedRadixCache+mamba/fork (UnifiedRadixCache) is in the tree but not in the fork's mamba build the harness "
                            "is wired to (sglang/srt/mem_cache/unified_cache_components/full_component.py does not exist)",
                            "UnifiedRadixCache+swa/fork (UnifiedRadixCache) is in the tree but not in the fork's sliding-window build the "
                            "harness is wired to (sglang/srt/mem_cache/unified_cache_components/full_component.py does not exist)",
                            "UnifiedRadixCache+swa (UnifiedRadixCache) is in the tree but not in the 0.5.22+ sliding-window build the "
                            "harness is wired to (sglang/srt/mem_cache/hybrid_cache/hybrid_pool_assembler.py does not exist)",
                            "UnifiedRadixCache+swa/inline (UnifiedRadixCache) is in the tree but not in the 0.5.20/0.5.21 sliding-window "
                            "build the harness is wired to (sglang/srt/mem_cache/hybrid_cache/hybrid_cache_controller.py has the "
                            "allocate_storage_hit of the 0.5.22+ drain)"), \
        "a build the tree lacks says so; the row's other build that runs does not"
    assert tree.missing == ("HiRadixCache: sglang/srt/mem_cache/hiradix_cache.py does not exist", NO_HI_MAMBA)
    assert [a.name for a in adapters_for(tree)] == ["sglang-live:UnifiedRadixCache@0.5.23"]


def test_a_unified_tree_whose_assembler_builds_a_mamba_stack_runs_its_mamba_component_as_its_own_row(tmp_path):
    sglang_package(tmp_path, hiradix=None, unified=True, unified_layout=True, unified_mamba=True)
    (tmp_path / "sglang-0.5.23.dist-info").mkdir()
    tree = locate(str(tmp_path))
    assert tree.layouts == ("UnifiedRadixCache", "UnifiedRadixCache+mamba")
    by_name = {a.name: a for a in adapters_for(tree)}
    assert list(by_name) == ["sglang-live:UnifiedRadixCache@0.5.23", "sglang-live:UnifiedRadixCache+mamba@0.5.23"]
    mamba = by_name["sglang-live:UnifiedRadixCache+mamba@0.5.23"]
    assert "pool:mamba" in mamba.capabilities and mamba.default_extra_pools == ("mamba",)
    assert "pool:mamba" not in by_name["sglang-live:UnifiedRadixCache@0.5.23"].capabilities


def test_unified_cache_outside_the_wired_layouts_is_reported_not_run(tmp_path):
    """A UnifiedRadixCache with neither the tree core nor the fork's component package is no layout the harness knows."""
    sglang_package(tmp_path / "python")
    sglang_package(tmp_path / "other", hiradix=None, unified=True)
    tree = locate(str(tmp_path / "other"))
    assert tree.layouts == ()
    no_components = "(sglang/srt/mem_cache/unified_cache_components/full_component.py does not exist)"
    no_core = "(sglang/srt/mem_cache/unified_cache/unified_tree_core.py does not exist)"
    assert tree.unwired == (f"UnifiedRadixCache/fork (UnifiedRadixCache) is in the tree but not in the fork's layout the harness "
                            f"is wired to {no_components}",
                            f"UnifiedRadixCache is in the tree but not in the 0.5.22+ layout the harness is wired to {no_core}",
                            f"UnifiedRadixCache/inline (UnifiedRadixCache) is in the tree but not in the 0.5.20/0.5.21 layout the harness "
                            f"is wired to {no_core}",
                            f"UnifiedRadixCache+dsa (UnifiedRadixCache) is in the tree but not in the 0.5.22+ DSA build the harness "
                            f"is wired to {no_core}",
                            f"UnifiedRadixCache+dsa/inline (UnifiedRadixCache) is in the tree but not in the 0.5.20/0.5.21 DSA build the "
                            f"harness is wired to {no_core}",
                            f"UnifiedRadixCache+mamba (UnifiedRadixCache) is in the tree but not in the 0.5.22+ mamba build the harness "
                            f"is wired to {no_core}",
                            f"UnifiedRadixCache+mamba/inline (UnifiedRadixCache) is in the tree but not in the 0.5.20/0.5.21 mamba build "
                            f"the harness is wired to {no_core}",
                            f"UnifiedRadixCache+mamba/fork (UnifiedRadixCache) is in the tree but not in the fork's mamba build the "
                            f"harness is wired to {no_components}",
                            f"UnifiedRadixCache+swa/fork (UnifiedRadixCache) is in the tree but not in the fork's sliding-window build "
                            f"the harness is wired to {no_components}",
                            f"UnifiedRadixCache+swa (UnifiedRadixCache) is in the tree but not in the 0.5.22+ sliding-window build the "
                            f"harness is wired to {no_core}",
                            f"UnifiedRadixCache+swa/inline (UnifiedRadixCache) is in the tree but not in the 0.5.20/0.5.21 sliding-window "
                            f"build the harness is wired to {no_core}")


FORK_UNIFIED = ("class UnifiedRadixCache(KVCacheEventMixin, BasePrefixCache):\n"
                "    def check_prefetch_progress(self, req_id: str) -> bool:\n        return True\n")


def fork_unified_package(root: Path, *, check_signature: str = FORK_UNIFIED, mamba: bool = False, swa: bool = False) -> None:
    """The fork's earlier UnifiedRadixCache: a component package, no tree core, the fork's prefetch by request id."""
    package = sglang_package(root, hiradix=None, unified=True, unified_mamba=mamba)
    (package / "srt" / "mem_cache" / "unified_radix_cache.py").write_text(check_signature)
    components = package / "srt" / "mem_cache" / "unified_cache_components"
    components.mkdir()
    (components / "full_component.py").write_text("class FullComponent:\n    pass\n")
    if swa:
        (components / "swa_component.py").write_text("class SWAComponent:\n    def _attach_swa_host_value(self, node, host_value):\n        pass\n")
        assembler = package / "srt" / "mem_cache" / "hybrid_cache" / "hybrid_pool_assembler.py"
        assembler.parent.mkdir(parents=True, exist_ok=True)
        assembler.write_text((assembler.read_text() if assembler.is_file() else "") + "\n\nclass _SwaStrategy(StackStrategy):\n    pass\n")


def test_the_forks_unified_cache_runs_in_its_own_layout(tmp_path):
    fork_unified_package(tmp_path, mamba=True, swa=True)
    tree = locate(f"{tmp_path}@abc")
    assert tree.layouts == ("UnifiedRadixCache/fork", "UnifiedRadixCache+mamba/fork", "UnifiedRadixCache+swa/fork")
    by_name = {a.name: a for a in adapters_for(tree)}
    assert list(by_name) == ["sglang-live:UnifiedRadixCache@abc", "sglang-live:UnifiedRadixCache+mamba@abc",
                             "sglang-live:UnifiedRadixCache+swa@abc"]
    assert by_name["sglang-live:UnifiedRadixCache+mamba@abc"].default_extra_pools == ("mamba",)
    swa = by_name["sglang-live:UnifiedRadixCache+swa@abc"]
    assert swa.default_extra_pools == ("swa",) and "pool:swa" in swa.capabilities and "pool:mamba" not in swa.capabilities
    assert not by_name["sglang-live:UnifiedRadixCache@abc"].default_extra_pools


def test_the_forks_unified_tree_without_its_swa_component_names_that_build_not_run(tmp_path):
    fork_unified_package(tmp_path)
    tree = locate(f"{tmp_path}@abc")
    assert tree.layouts == ("UnifiedRadixCache/fork",)
    assert "UnifiedRadixCache+swa/fork (UnifiedRadixCache) is in the tree but not in the fork's sliding-window build the harness is " \
           "wired to (sglang/srt/mem_cache/hybrid_cache/hybrid_pool_assembler.py does not exist)" in tree.unwired


def test_a_component_tree_on_another_prefetch_protocol_is_not_the_forks_layout(tmp_path):
    """The component package alone does not make the fork's layout: its check takes a request id (a handle is another protocol)."""
    fork_unified_package(tmp_path, check_signature=FORK_UNIFIED.replace("req_id: str", "handle: CacheRequestHandle"))
    tree = locate(str(tmp_path))
    assert tree.layouts == ()
    assert tree.unwired[0] == ("UnifiedRadixCache/fork (UnifiedRadixCache) is in the tree but not in the fork's layout the harness is "
                               "wired to (sglang/srt/mem_cache/unified_radix_cache.py has no check_prefetch_progress taking a request id "
                               "(the fork's prefetch))")


def test_package_directory_itself(tmp_path):
    package = sglang_package(tmp_path)
    assert locate(str(package)).import_root == tmp_path


def test_label_suffix_names_the_row(tmp_path):
    sglang_package(tmp_path / "python", version="0.5.9")
    tree = locate(f"{tmp_path}@9e9fde147")
    assert tree.label == "9e9fde147"
    assert [a.name for a in adapters_for(tree)] == ["sglang-live:HiRadixCache@9e9fde147"]


def test_class_only_in_a_comment_is_missing(tmp_path):
    sglang_package(tmp_path, hiradix="# class HiRadixCache(RadixCache) was removed\nclass UnifiedRadixCache:\n    pass\n")
    tree = locate(str(tmp_path))
    assert tree.layouts == ()
    assert tree.missing == ("HiRadixCache: not defined in sglang/srt/mem_cache/hiradix_cache.py", NO_HI_MAMBA, NO_UNIFIED)


@pytest.mark.parametrize("value, fragment", [
    ("{tmp}/nowhere", "an existing path"),
    ("{tmp}", "an SGLang source checkout"),
    ("{tmp}@bad label!", "LABEL made of"),
], ids=["missing-path", "not-sglang", "bad-label"])
def test_bad_value_is_one_line(tmp_path, value, fragment):
    (tmp_path / "README.md").write_text("not sglang")
    with pytest.raises(ConfigError) as info:
        locate(value.format(tmp=tmp_path))
    message = str(info.value)
    assert "\n" not in message and message.startswith("invalid --sglang-live:") and fragment in message, message


def test_parse_option_without_label():
    assert parse_option("/src/sglang") == (Path("/src/sglang"), None)


def test_tree_without_any_live_class_is_reported_not_run(tmp_path):
    sglang_package(tmp_path, hiradix=None, unified=True)
    with pytest.raises(ConfigError) as info:
        live_trees([str(tmp_path)])
    message = str(info.value)
    assert "HiRadixCache: sglang/srt/mem_cache/hiradix_cache.py does not exist" in message
    assert "UnifiedRadixCache is in the tree but not in the 0.5.22+ layout the harness is wired to" in message


def test_one_tree_per_run(tmp_path):
    sglang_package(tmp_path / "a")
    sglang_package(tmp_path / "b")
    with pytest.raises(ConfigError, match="one SGLang tree per run"):
        live_trees([str(tmp_path / "a"), str(tmp_path / "b")])


def test_adapter_travels_to_rank_processes_by_pickle(tmp_path):
    import pickle

    sglang_package(tmp_path / "python")
    (adapter,) = adapters_for(locate(f"{tmp_path}@abc"))
    again = pickle.loads(pickle.dumps(adapter))
    assert again == adapter and again.name == "sglang-live:HiRadixCache@abc"
    assert "multi_rank" in again.capabilities and not again.default_extra_pools


def test_each_class_declares_what_its_live_build_offers(tmp_path):
    sglang_package(tmp_path / "python", hi_mamba=True)
    by_name = {a.class_name: a for a in adapters_for(locate(f"{tmp_path}@abc"))}
    assert "pool:mamba" not in by_name["HiRadixCache"].capabilities, "HiRadixCache's only sidecar needs 64-token pages"
    assert by_name["HiMambaRadixCache"].capabilities == {"multi_rank", "pool:mamba", "kv_formats", "stepped_backups"}
    assert by_name["HiMambaRadixCache"].default_extra_pools == ("mamba",)
    assert not any("held_copies" in a.capabilities for a in by_name.values()), "copies are synchronous on CPU: no gate can hold one"
