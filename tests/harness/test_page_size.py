"""Every scenario runs at the implementation's own page size (an adapter's `page_size`), never at an assumed one.

An implementation whose code fixes its page size (upstream's DSA device pool
asserts 64) declares it; make_cache, the `page_size` fixture, the multi-rank
scenarios, the exploration and the reproduction scripts then size everything
by it. The built-in caches declaring 16- and 8-token pages must pass the
whole suite as they pass it at 4.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from conformance.adapter import DEFAULT_PAGE_SIZE, adapter_page_size
from conformance.implementations.requirements import missing
from spec.errors import ConfigError

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def test_an_adapter_without_a_page_size_runs_at_the_default_and_one_declaring_it_at_its_own():
    assert adapter_page_size(SimpleNamespace(name="a")) == DEFAULT_PAGE_SIZE == 4
    assert adapter_page_size(SimpleNamespace(name="a", page_size=None)) == 4
    assert adapter_page_size(SimpleNamespace(name="a", page_size=64)) == 64


@pytest.mark.parametrize("value", [0, -4, True, 2.0, "64"])
def test_a_page_size_that_is_not_a_positive_int_is_one_line_naming_the_adapter(value):
    with pytest.raises(ConfigError) as info:
        adapter_page_size(SimpleNamespace(name="mine", page_size=value))
    message = str(info.value)
    assert "\n" not in message and "mine.page_size" in message and repr(value) in message, message


def test_a_fixed_page_size_lacks_the_page_sizes_requirement():
    free = SimpleNamespace(name="free", capabilities=frozenset(), default_extra_pools=())
    fixed = SimpleNamespace(name="fixed", capabilities=frozenset(), default_extra_pools=(), page_size=64)
    assert missing(free, ["page_sizes"]) == []
    assert missing(fixed, ["page_sizes"]) == ["adapter 'fixed' runs at 64-token pages only (its code fixes the page size)"]


@pytest.mark.parametrize("factory, row", [("hiradix_pages16", "hiradix_pages16"), ("hi_mamba_radix_pages8", "hi_mamba_radix_pages8")])
def test_the_whole_suite_passes_on_a_cache_at_another_page_size(subprocess_pytest, factory, row):
    env = {"PYTHONPATH": os.pathsep.join([str(HERE), str(REPO)])}  # the adapter module, as a third party's would be importable
    result = subprocess_pytest.run(REPO, "conformance/", "-q", "-n", "2", "-p", "no:randomly", "--cache-impl", f"fixed_page_adapter:{factory}",
                                   fixtures=False, env_extra=env)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    line = next(line for line in out.splitlines() if line.startswith(f"{row}/cpu "))
    assert "F" not in line.split(None, 1)[1] and " P" in line, line
