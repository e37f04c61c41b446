"""Built-in caches declaring a fixed page size, as an implementation whose code asserts one does.

`hiradix_pages16` is the built-in hiradix (KV and the indexer) run at
16-token pages: every scenario must size its requests, batches and checks
by the adapter's page size, so the whole suite passing on it shows that no
scenario assumes 4-token pages. Loaded by tests/harness/test_page_size.py
through --cache-impl, as a third party's adapter would be.
"""

from __future__ import annotations

from dataclasses import dataclass

from caches.adapters import BuiltinAdapter, hiradix, hi_mamba_radix


@dataclass(frozen=True)
class FixedPageAdapter(BuiltinAdapter):
    page_size: int = 16


def hiradix_pages16() -> FixedPageAdapter:
    base = hiradix()
    return FixedPageAdapter("hiradix_pages16", base.default_extra_pools, base.capabilities, cache="hiradix", page_size=16)


def hi_mamba_radix_pages8() -> FixedPageAdapter:
    base = hi_mamba_radix()
    return FixedPageAdapter("hi_mamba_radix_pages8", base.default_extra_pools, base.capabilities, cache="hi_mamba_radix", page_size=8)
