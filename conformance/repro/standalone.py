"""An implementation's caches outside pytest: what a reproduction script builds them with.

    from conformance.repro.standalone import CacheFactory, load_adapter
    adapter = load_adapter(sglang_live="/path/to/sglang", name="HiMambaRadixCache")
    with CacheFactory(adapter) as make_cache:
        explore.replay(make_cache, scenario, "io,abort,io", profile=make_cache.profile)

load_adapter takes what the suite's command line takes: a factory string
(`--cache-impl package.module:factory`), an SGLang tree (`--sglang-live
PATH`, its live cache classes) or an SGLang checkout (`--sglang PATH`, its
decision code in this project's caches), and picks one implementation by
name. CacheFactory is the suite's make_cache fixture without pytest: each
cache gets the injected ManualClock, a TraceRecorder judged under the
adapter's declared profile and a Gate on it, unless the caller passes its
own (explore.replay does); close() closes every cache it made and fails as
the fixture's teardown does (a thread left running, a background thread
that failed).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any, Sequence

from conformance.adapter import CacheEnv, adapter_page_size
from conformance.implementations.declarations import declarations
from conformance.gates import Gate
from conformance.oracles.lifecycle import close_and_check
from conformance.implementations.loader import check_adapter, load_checkout_adapters, load_factory
from conformance.scenarios.schedule_model import adapter_io_order
from spec.clock import ManualClock
from spec.config import TerminationConfig
from spec.errors import ConfigError
from spec.trace import TraceRecorder

SOURCES = ("cache_impl", "sglang_live", "sglang")


def class_of(name: str) -> str:
    """'sglang-live:HiRadixCache@9e9fde147' -> 'HiRadixCache', 'sglang:hiradix' -> 'hiradix': the class, whatever the tree."""
    return name.partition(":")[2].partition("@")[0] if ":" in name else name


def _pick(adapters: Sequence[Any], name: str | None, where: str) -> Any:
    names = [a.name for a in adapters]
    if name is None and len(adapters) == 1:
        return adapters[0]
    # By its class as well as its row name: a script written for one tree runs on another.
    found = [a for a in adapters if name is not None and (name == a.name or class_of(name) == class_of(a.name))]
    if len(found) != 1:
        raise ConfigError("name", name, f"one of the implementations {where} offers: {', '.join(names) or '(none)'}")
    return found[0]


def load_adapter(*, cache_impl: str | None = None, sglang_live: str | None = None, sglang: str | None = None,
                 name: str | None = None) -> Any:
    """The adapter of one implementation, from exactly one of a factory string, an SGLang tree or an SGLang checkout."""
    given = {k: v for k, v in (("cache_impl", cache_impl), ("sglang_live", sglang_live), ("sglang", sglang)) if v}
    if len(given) != 1:
        raise ConfigError("implementation", sorted(given) or None, "exactly one of cache_impl, sglang_live, sglang")
    if cache_impl:
        return check_adapter(load_factory(cache_impl)(), cache_impl)
    if sglang_live:
        from conformance.live import runtime as live_runtime
        from conformance.live.adapter import adapters_for
        from conformance.live.plugin import live_trees

        (tree,) = live_trees([sglang_live])
        live_runtime.load(tree)
        return _pick(adapters_for(tree), name, f"--sglang-live {sglang_live}")
    adapters, _missing = load_checkout_adapters("sglang", str(sglang))
    return _pick(adapters, name, f"--sglang {sglang}")


class CacheFactory:
    """make_cache(policy=..., page_size=..., **CacheEnv fields) -> a CacheUnderTest, outside pytest."""

    def __init__(self, adapter: Any, *, device: str = "cpu", storage_dir: Path | None = None) -> None:
        self.adapter = adapter
        self.device = device
        declared = declarations(adapter)
        self.profile = declared.profile.id
        self.io_order = adapter_io_order(adapter)
        self.page_size = adapter_page_size(adapter)
        self.clock = ManualClock(1000.0)
        self.trace = TraceRecorder(self.clock, profile=self.profile)
        self.gate = Gate(self.trace)
        self._own_dir = storage_dir is None
        self.storage_dir = Path(tempfile.mkdtemp(prefix="conformance-repro-")) if storage_dir is None else Path(storage_dir)
        self.made: list[Any] = []
        self._count = 0

    def __call__(self, policy: str = "wait_complete", page_size: int | None = None, *, storage_dir: Path | None = None, **env_fields: Any) -> Any:
        termination = env_fields.pop("termination", None) or TerminationConfig(policy=policy, page_size=page_size or self.page_size)
        self._count += 1
        env = CacheEnv(
            device=self.device, termination=termination,
            storage_dir=Path(storage_dir) if storage_dir is not None else self.storage_dir / f"cache-{self._count}",
            clock=env_fields.pop("clock", self.clock), trace=env_fields.pop("trace", self.trace),
            extra_pools=tuple(env_fields.pop("extra_pools", self.adapter.default_extra_pools)), **env_fields,
        )
        cache = self.adapter.create(env)
        self.made.append(cache)
        return cache

    def close(self) -> None:
        """Close every cache made (each even when an earlier one failed), then check as the suite's teardown does."""
        try:
            close_and_check(self.made, gates=[self.gate])
        finally:
            self.made.clear()
            self.gate.close()
            if self._own_dir:
                shutil.rmtree(self.storage_dir, ignore_errors=True)

    def __enter__(self) -> "CacheFactory":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
