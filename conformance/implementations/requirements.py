"""What a conformance test needs of an adapter, known at collection: items exist only for adapters that have it.

A test says what it needs with @pytest.mark.needs(...) (on the function or on
one of its params). Each requirement is one of:

    <capability>            an adapter capability (conformance/adapter.py, CAPABILITIES)
    configure               the adapter offers configure(fields)
    page_sizes              the adapter builds caches at any page size (it declares no fixed page_size)
    extra_pools             the adapter runs with at least one extra pool by default
    default_pool:<name>     the adapter runs with that extra pool by default

For an adapter without it the item is not collected (no phantom skip); the
report still shows the clauses it cites as not judged, saying what was
missing. Needs that only a running cache can tell (a storage layout, say)
stay runtime skips.
"""

from __future__ import annotations

from typing import Any, Iterable

from conformance.adapter import CAPABILITIES
from spec.errors import ConfigError

ACCEPTED = "a capability (" + ", ".join(sorted(CAPABILITIES)) + "), configure, page_sizes, extra_pools or default_pool:<name>"


def check_requirement(value: Any) -> str:
    if not isinstance(value, str):
        raise ConfigError("needs", value, ACCEPTED)
    if value in CAPABILITIES or value in ("configure", "page_sizes", "extra_pools"):
        return value
    if value.startswith("default_pool:") and value.partition(":")[2]:
        return value
    raise ConfigError("needs", value, ACCEPTED)


def missing(adapter: Any, requirements: Iterable[str]) -> list[str]:
    """Why `adapter` lacks each requirement it does not meet, one phrase each (empty: it meets them all)."""
    name = getattr(adapter, "name", repr(adapter))
    pools = tuple(getattr(adapter, "default_extra_pools", ()))
    out = []
    for requirement in requirements:
        if requirement in CAPABILITIES:
            if requirement not in adapter.capabilities:
                out.append(f"adapter {name!r} does not declare capability {requirement} ({CAPABILITIES[requirement]})")
        elif requirement == "configure":
            if not callable(getattr(adapter, "configure", None)):
                out.append(f"adapter {name!r} has no configure(fields): configuration checks need it")
        elif requirement == "page_sizes":
            fixed = getattr(adapter, "page_size", None)
            if fixed is not None:
                out.append(f"adapter {name!r} runs at {fixed}-token pages only (its code fixes the page size)")
        elif requirement == "extra_pools":
            if not pools:
                out.append(f"adapter {name!r} runs without extra pools by default")
        elif requirement.partition(":")[2] not in pools:
            out.append(f"adapter {name!r} runs without the {requirement.partition(':')[2]} pool by default (default extra pools: {pools or 'none'})")
    return out
