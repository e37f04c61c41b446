"""A field an implementation accepts and never reads is named as the cause: from upstream's parser (evidence), in C2's and T1's words."""

from __future__ import annotations

from pathlib import Path

import pytest

# Imported here so that pytester's in-process runs find them already loaded (torch cannot be imported twice).
import caches.adapters  # noqa: F401
import conformance.plugin.fixtures  # noqa: F401
import conformance.plugin.recorder  # noqa: F401
from conformance.live.evidence import ignored_fields
from conformance.live.layouts import BY_KEY
from conformance.live.tree import locate

pytest_plugins = ["pytester"]
SUITE = Path(__file__).resolve().parents[2] / "conformance" / "suite"

# 0.5.2x-shaped: the controller's parser pops base and per-token, and hands the rest on.
RELEASE_CONTROLLER = '''
class HybridCacheController(HiCacheController):
    @staticmethod
    def parse_storage_backend_extra_config(storage_backend_extra_config):
        extra_config = json.loads(storage_backend_extra_config)
        prefetch_threshold = extra_config.pop("prefetch_threshold", 256)
        prefetch_timeout_base = extra_config.pop("prefetch_timeout_base", 1)
        prefetch_timeout_per_ki_token = extra_config.pop(
            "prefetch_timeout_per_ki_token", 0.25
        )
        return extra_config, prefetch_threshold, prefetch_timeout_base, prefetch_timeout_per_ki_token


class Other:
    def elsewhere(self):
        return {"prefetch_timeout_max": 3}
'''

# fork-shaped: the class's own parser reads all three.
FORK_CLASS = '''
class HiRadixCache(RadixCache):
    def _parse_storage_backend_extra_config(self, storage_backend_extra_config):
        extra_config = json.loads(storage_backend_extra_config)
        prefetch_timeout_base = extra_config.pop("prefetch_timeout_base", defaults.base)
        prefetch_timeout_per_ki_token = extra_config.pop("prefetch_timeout_per_ki_token", defaults.per_ki_token)
        prefetch_timeout_max = extra_config.pop(
            "prefetch_timeout_max", defaults.max
        )
        return extra_config
'''


def tree_of(root: Path, files: dict[str, str]):
    package = root / "python" / "sglang"
    for rel, text in {"__init__.py": "", **files}.items():
        (package / rel).parent.mkdir(parents=True, exist_ok=True)
        (package / rel).write_text(text)
    return locate(str(root))


def test_a_key_the_parser_never_reads_is_declared_ignored_with_its_line(tmp_path):
    tree = tree_of(tmp_path, {"srt/mem_cache/unified_radix_cache.py": "class UnifiedRadixCache:\n    pass\n",
                              "srt/mem_cache/hybrid_cache/hybrid_cache_controller.py": RELEASE_CONTROLLER})
    found = ignored_fields(tree, BY_KEY["UnifiedRadixCache"])
    assert list(found) == ["timeout_max_s"]  # a mention outside the parser does not count as reading it
    (line,) = found["timeout_max_s"]
    assert line.startswith("python/sglang/srt/mem_cache/hybrid_cache/hybrid_cache_controller.py:4: parse_storage_backend_extra_config "
                           "reads prefetch_timeout_base, prefetch_timeout_per_ki_token and never prefetch_timeout_max"), line


def test_a_parser_reading_every_key_ignores_none(tmp_path):
    tree = tree_of(tmp_path, {"srt/mem_cache/hiradix_cache.py": FORK_CLASS})
    assert ignored_fields(tree, BY_KEY["HiRadixCache"]) == {}


IGNORING = '''
from caches.adapters import hiradix


class IgnoresMax:
    """hiradix, configured through a parser that drops timeout_max_s unread, and saying so."""

    def __init__(self):
        self.inner = hiradix()
        self.name = "ignores_max"
        self.ignored_fields = {"timeout_max_s": ("pkg/parser.py:7: parse reads base and per-token, never max",)}

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def configure(self, fields):
        self.inner.configure({k: v for k, v in fields.items() if k != "timeout_max_s"})


def ignoring():
    return IgnoresMax()
'''


def test_c2_names_the_ignored_field_as_the_cause(pytester: pytest.Pytester):
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(adapters_under_test=IGNORING)
    pytester.syspathinsert()
    result = pytester.runpytest_inprocess("-p", "conformance.plugin", "-p", "conformance.plugin.fixtures", "-p", "no:cacheprovider",
                                          "-p", "no:benchmark", "--cache-impl", "adapters_under_test:ignoring",
                                          str(SUITE / "test_config.py"), "-k", "test_bad_numeric_field_is_rejected", "-p", "no:randomly")
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed") == 3 and outcomes.get("passed") == 9, result.outlines[-30:]
    text = "\n".join(result.outlines)
    assert ("C2: ignores_max accepted {'policy': 'timeout', 'page_size': 4, 'timeout_base_s': 2.0, 'timeout_per_ki_token_s': 0.1, "
            "'timeout_max_s': -30.0}: timeout_max_s is accepted and ignored (pkg/parser.py:7: parse reads base and per-token, never max)") in text
