"""What one pytest process decides when it runs the suite: adapters, devices, expected failures.

Built by the plugin (conformance/plugin/__init__.py) at configure time, once per
process (each xdist worker builds its own; nothing is shared). Loading an
adapter imports the implementation (and torch, unless its module defers it), which is why nothing here is
imported until a session runs the suite.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from conformance.implementations import devices
from conformance.implementations.declarations import Declarations, declarations
from conformance.plugin.expectations import Expectations, collect as collect_expected_failures
from conformance.implementations.loader import Origin, load_adapters, load_checkout_adapters
from conformance.report.matrix import PROP_WEAK, item_properties
from conformance.implementations.requirements import missing
from conformance.scenarios.schedule_model import adapter_io_order
from spec.preconditions import PRECONDITIONS
from spec.errors import ConfigError

MATCHED_KEY = "conformance_matched_expected_failures"  # xdist workeroutput key
NOT_COLLECTED_KEY = "conformance_not_collected"  # xdist workeroutput key: Harness.not_collected


@dataclass
class Harness:
    adapters: list
    origins: list[Origin]  # one per adapter, same order
    expectations: Expectations
    distributed: bool  # xdist worker or controller: one "cuda" param
    missing: list = field(default_factory=list)  # (implementation, why not run): classes a --sglang checkout lacks
    declared: dict[str, Declarations] = field(default_factory=dict)  # adapter name -> its profile and deployment
    not_collected: list = field(default_factory=list)  # items left out for their adapter: {nodeid, impl, device, clauses, state, reason}
    _device_params: list[devices.DeviceParam] | None = field(default=None, repr=False)

    def declarations_of(self, adapter: Any) -> Declarations:
        return self.declared[adapter.name]

    def device_params(self) -> list[devices.DeviceParam]:
        if self._device_params is None:  # first use is after pinning: CUDA may initialize now
            self._device_params = devices.device_params(self.distributed, devices.visible_gpu_count())
        return self._device_params

    def device_ids(self) -> list[str]:
        """The matrix's columns: the devices tests run on, and the GPU column that did not run when none is visible."""
        if self.distributed:  # the controller need not initialize CUDA to know the columns
            return [devices.CPU, devices.CUDA]
        ids = [param.id for param in self.device_params()]
        return ids if len(ids) > 1 else [*ids, devices.CUDA]

    def is_adapter(self, value: Any) -> bool:
        return any(value is adapter for adapter in self.adapters)

    def header_lines(self, config: pytest.Config) -> list[str]:
        from conformance.live import plugin as live_plugin

        where = "one GPU per xdist worker" if self.distributed else "every visible GPU in this process"
        lines = [f"conformance: implementations {', '.join(a.name for a in self.adapters)}; "
                 f"devices {', '.join(self.device_ids())} ({where}); {len(self.expectations.entries)} expected failure(s)"]
        return lines + [f"conformance: {name} not run: {why}" for name, why in self.missing] + live_plugin.report_lines(config)

    def note_collected(self, items: list[pytest.Item]) -> None:
        """Tests collected but not run here still match their expected failures (which are then not stale)."""
        for item in items:
            callspec = getattr(item, "callspec", None)
            adapter = callspec.params.get("impl") if callspec is not None else None
            if self.is_adapter(adapter):
                self.expectations.find(adapter.name, getattr(item, "originalname", item.name), item.name, clause_ids(item))

    def mark_items(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        """Each conformance test carries its impl, device, clauses (or weak) for the matrix; listed ones become strict xfails.

        An item that says nothing about its adapter (it needs what the adapter
        lacks, assumes what its deployment does not produce, or checks only
        another architecture's mechanism) is not collected: it is listed in
        not_collected, and the report shows its clauses as not judged or not
        applicable, with the reason.
        """
        kept, dropped = [], []
        for item in items:
            callspec = getattr(item, "callspec", None)
            adapter = callspec.params.get("impl") if callspec is not None else None
            if not self.is_adapter(adapter):
                kept.append(item)  # not one of the suite's tests: someone else's parameter named impl
                continue
            clauses = clause_ids(item)
            device = callspec.params.get("device", devices.ANY_DEVICE)
            left_out = self._left_out(item, adapter, clauses)
            if left_out is not None:
                state, why = left_out
                self.not_collected.append({"nodeid": item.nodeid, "impl": adapter.name, "device": device, "clauses": clauses,
                                           "state": state, "reason": why})
                dropped.append(item)
                continue
            kept.append(item)
            item.user_properties.extend(item_properties(adapter.name, device, clauses))
            weak = item.get_closest_marker("weak")
            if weak is not None:
                item.user_properties.append((PROP_WEAK, str(weak.args[0]) if weak.args else ""))
            entry = self.expectations.find(adapter.name, getattr(item, "originalname", item.name), item.name, clauses)
            if entry is not None:
                item.add_marker(pytest.mark.xfail(strict=True, reason=f"expected failure of {adapter.name} ({entry.source}): {entry.reason}"))
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        # The fastest verdicts first: a wrong decision or race shows within seconds, before the long explorations and launches.
        items[:] = sorted(kept, key=run_order)
        workeroutput = getattr(config, "workeroutput", None)
        if workeroutput is not None:
            workeroutput[MATCHED_KEY] = sorted(self.expectations.matched)
            workeroutput[NOT_COLLECTED_KEY] = list(self.not_collected)

    def _left_out(self, item: pytest.Item, adapter: Any, clauses: list[str]) -> tuple[str, str] | None:
        """("not-judged" | "not-applicable", why) for an item that says nothing about this adapter; None: it runs."""
        needs = [r for marker in item.iter_markers("needs") for r in marker.args]
        lacking = missing(adapter, needs)
        marker = item.get_closest_marker("io_order")
        if marker is not None and adapter_io_order(adapter) != marker.args[0]:
            lacking.append(f"it drives the IO in the order {marker.args[0]!r} ({marker.args[1]}); adapter {adapter.name!r} "
                           f"declares io_order {adapter_io_order(adapter)!r}")
        if lacking:
            return "not-judged", "; ".join(lacking)
        return self._judged_out(item, adapter, clauses)

    def _judged_out(self, item: pytest.Item, adapter: Any, clauses: list[str]) -> tuple[str, str] | None:
        """("not-applicable" | "not-judged", why) for a test that says nothing about this implementation; None: it judges it."""
        declared = self.declarations_of(adapter)
        unmet = declared.unmet(preconditions_of(item))
        if unmet:
            why = "; ".join(f"the scenario assumes {p} ({PRECONDITIONS[p].statement}), which {adapter.name}'s deployment does not produce: "
                            + "; ".join(evidence) for p, evidence in unmet)
            return "not-judged", why
        foreign = declared.not_applicable(clauses)
        if clauses and len(foreign) == len(clauses):
            return "not-applicable", (f"it checks {', '.join(foreign)}, mechanism of other architectures; {adapter.name} declares "
                                      f"{declared.profile.id} ({declared.profile.title})")
        return None


# Suite modules by how fast they give a verdict; a module not listed runs between the single-rank races and the slow ones.
FAST_FIRST = ("test_decision", "test_smoke_roundtrip", "test_windows", "test_fence", "test_fence_holds", "test_liveness",
              "test_faults", "test_io_bound", "test_foreign_pages", "test_config")
SLOW_LAST = ("test_exploration", "test_multirank")


def run_order(item: pytest.Item) -> int:
    stem = getattr(getattr(item, "path", None), "stem", "")
    if stem in FAST_FIRST:
        return FAST_FIRST.index(stem)
    if stem in SLOW_LAST:
        return len(FAST_FIRST) + 1 + SLOW_LAST.index(stem)
    return len(FAST_FIRST)


def preconditions_of(item: pytest.Item) -> list[str]:
    out: list[str] = []
    for marker in item.iter_markers("precondition"):
        out += [p for p in marker.args if p not in out]
    return out


def clause_ids(item: pytest.Item) -> list[str]:
    ids: list[str] = []
    for marker in item.iter_markers("clause"):
        ids += [c for c in marker.args if c not in ids]
    return ids


def _distributing(config: pytest.Config) -> bool:
    return config.getoption("dist", "no") != "no" and bool(config.getoption("tx", None))


def one_line(exc: BaseException) -> str:
    text = str(exc) if isinstance(exc, ConfigError) else f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())


def build_harness(config: pytest.Config) -> Harness:
    """Every adapter of this run, or one pytest.UsageError line saying which one is wrong and why."""
    from conformance.live import plugin as live_plugin

    specs = config.getoption("--cache-impl")
    try:
        live_values = config.getoption("--sglang-live")
        live = [(adapter, Origin("--sglang-live", None, live_values[0])) for adapter in live_plugin.live_adapters(config)]
        loaded = load_adapters(specs, extra=live)
    except Exception as exc:  # a bad adapter is a usage error, whatever the factory raised
        prefix = "" if isinstance(exc, ConfigError) else f"loading adapters {specs or '(entry points)'} failed: "
        raise pytest.UsageError(prefix + one_line(exc)) from None
    missing = _add_checkout_adapters(config, loaded)
    adapters = [adapter for adapter, _ in loaded]
    try:
        declared = {adapter.name: declarations(adapter) for adapter in adapters}
    except ConfigError as exc:
        raise pytest.UsageError(one_line(exc)) from None
    try:
        entries = collect_expected_failures(adapters, config.getoption("--expected-failures"))
    except ConfigError as exc:
        raise pytest.UsageError(one_line(exc)) from None
    distributed = getattr(config, "workerinput", None) is not None or _distributing(config)
    return Harness(adapters, [origin for _, origin in loaded], Expectations(entries), distributed, missing, declared)


def _add_checkout_adapters(config: pytest.Config, loaded: list[tuple[Any, Origin]]) -> list[tuple[str, str]]:
    """--sglang PATH: append the checkout's adapters; returns the classes it lacks, with why."""
    path = config.getoption("--sglang")
    if path is None:
        return []
    shim = config.getoption("--sglang-shim")
    try:
        found, missing = load_checkout_adapters("sglang", path, shim)
    except Exception as exc:  # the factory's own error, on one line, saying the option unless it already does
        named = isinstance(exc, ConfigError) and getattr(exc, "field", None) == "--sglang"
        raise pytest.UsageError(("" if named else f"--sglang {path}: ") + one_line(exc)) from None
    clash = sorted({a.name for a in found} & {a.name for a, _ in loaded})
    if clash:
        raise pytest.UsageError(f"--sglang {path}: adapter names {clash} are already taken")
    loaded += [(adapter, Origin("--sglang", shim, path)) for adapter in found]
    return missing
