"""Finds the adapters to run: entry points, plus any named with --cache-impl; and where each came from."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, Callable, Sequence

from conformance.adapter import CHECKOUT_ENTRY_POINT_GROUP, ENTRY_POINT_GROUP, CAPABILITIES, CacheAdapter, adapter_page_size
from conformance.scenarios.schedule_model import DEFAULT_IO_ORDER, check_io_order
from spec.errors import ConfigError


def load_factory(spec: str, option: str = "--cache-impl") -> Callable[..., Any]:
    """'package.module:factory' -> the factory callable."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(option, spec, "'package.module:factory'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(option, spec, f"an importable module ({exc})") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ConfigError(option, spec, f"a callable named {attr!r} in {module_name}")
    return factory


def check_adapter(adapter: Any, origin: str) -> CacheAdapter:
    if not isinstance(adapter, CacheAdapter):
        raise ConfigError(origin, type(adapter).__name__, "a factory returning a CacheAdapter (name, capabilities, default_extra_pools, create)")
    unknown = set(adapter.capabilities) - set(CAPABILITIES)
    if unknown:
        raise ConfigError(f"{origin} capabilities", sorted(unknown), "capabilities among " + ", ".join(sorted(CAPABILITIES)))
    check_io_order(getattr(adapter, "io_order", DEFAULT_IO_ORDER), f"{origin} io_order")
    adapter_page_size(adapter)
    return adapter


@dataclass(frozen=True)
class Origin:
    """How an adapter reached the run, for the report: the option or entry point, and the factory it named."""

    source: str  # "--cache-impl", "entry point", "--sglang", "--sglang-live"
    factory: str | None = None  # 'package.module:factory'
    value: str | None = None  # the option's value or the entry point's name
    distribution: tuple[str, str] | None = None  # (name, version) of the distribution declaring the entry point


def _entry_point_origin(ep: Any) -> Origin:
    dist = getattr(ep, "dist", None)
    declared = (dist.metadata["Name"], dist.version) if dist is not None else None
    return Origin("entry point", ep.value, ep.name, declared)


def load_adapters(cli_specs: Sequence[str], *, use_entry_points: bool = True,
                  extra: Sequence[tuple[CacheAdapter, Origin]] = ()) -> list[tuple[CacheAdapter, Origin]]:
    """--cache-impl adapters, else every registered entry point, plus `extra` (e.g. --sglang-live); names must be unique."""
    loaded: list[tuple[CacheAdapter, Origin]] = []
    if cli_specs:
        for spec in cli_specs:
            loaded.append((check_adapter(load_factory(spec)(), spec), Origin("--cache-impl", spec, spec)))
    elif use_entry_points:
        for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
            loaded.append((check_adapter(ep.load()(), f"entry point {ep.name}"), _entry_point_origin(ep)))
    loaded += [(check_adapter(adapter, adapter.name), origin) for adapter, origin in extra]
    names = [a.name for a, _ in loaded]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError("adapter names", duplicates, "unique names")
    if not loaded:
        raise ConfigError("--cache-impl", None, f"at least one adapter (none given and no '{ENTRY_POINT_GROUP}' entry points)")
    return loaded


def load_checkout_adapters(kind: str, path: str, factory_spec: str | None = None) -> tuple[list[CacheAdapter], list[tuple[str, str]]]:
    """Adapters for a checkout of another project (`--sglang PATH`), and the classes it lacks, with why.

    The factory is the entry point `kind` of CHECKOUT_ENTRY_POINT_GROUP, or
    factory_spec ('package.module:factory') when given.
    """
    option = f"--{kind}-shim"
    if factory_spec:
        factory = load_factory(factory_spec, option)
        origin = factory_spec
    else:
        found = [ep for ep in entry_points(group=CHECKOUT_ENTRY_POINT_GROUP) if ep.name == kind]
        if not found:
            raise ConfigError(f"--{kind}", path, f"a registered '{kind}' entry point in {CHECKOUT_ENTRY_POINT_GROUP} "
                              f"(reinstall hicache-conformance), or name the factory with {option} package.module:factory")
        factory = found[0].load()
        origin = f"entry point {kind}"
    result = factory(path)
    if not (isinstance(result, tuple) and len(result) == 2):
        raise ConfigError(origin, type(result).__name__, "a factory returning (adapters, [(name, why missing)])")
    adapters, missing = result
    return [check_adapter(a, origin) for a in adapters], [(str(name), str(why)) for name, why in missing]
