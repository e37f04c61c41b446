"""The small prefetches the explorer enumerates: one Scenario each, by name.

Replay messages and reproduction scripts name a scenario from SCENARIOS, so a
name here is part of the suite's interface: rename one and old replays stop
resolving.
"""

from __future__ import annotations

from dataclasses import dataclass

from spec.config import Policy, TerminationConfig
from spec.errors import ConfigError


@dataclass(frozen=True)
class Scenario:
    """One small prefetch whose interleavings are enumerated.

    pages = kv_batches * batch_pages, loaded batch by batch; extra_pools None
    means the adapter's default_extra_pools.
    """

    name: str
    policy: str
    kv_batches: int = 2
    batch_pages: int = 2
    extra_pools: tuple[str, ...] | None = None
    ticks: int = 0
    aborts: int = 0
    seed: int = 11
    page_size: int = 4
    max_actions: int = 64

    def __post_init__(self) -> None:
        Policy.parse(self.policy, "policy")
        for name in ("kv_batches", "batch_pages", "page_size", "max_actions"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(name, value, "an integer > 0")
        for name in ("ticks", "aborts"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(name, value, "an integer >= 0")
        if self.extra_pools is not None and (isinstance(self.extra_pools, str) or not isinstance(self.extra_pools, tuple)):
            raise ConfigError("extra_pools", self.extra_pools, "None (the adapter's default) or a tuple of pool names")

    @property
    def pages(self) -> int:
        return self.kv_batches * self.batch_pages

    @property
    def tokens(self) -> int:
        return self.pages * self.page_size

    @property
    def termination(self) -> TerminationConfig:
        return TerminationConfig(policy=self.policy, page_size=self.page_size)


def _catalogue() -> dict[str, Scenario]:
    scenarios = []
    for policy in ("wait_complete", "timeout", "best_effort"):
        scenarios.append(Scenario(f"{policy}/2batches", policy))
        scenarios.append(Scenario(f"{policy}/2batches+tick", policy, ticks=1))
        scenarios.append(Scenario(f"{policy}/2batches+abort", policy, aborts=1))
        # A tick changes no wait_complete decision; leaving it out there keeps the count small.
        ticks = 0 if policy == "wait_complete" else 1
        name = f"{policy}/3batches" + ("+tick" if ticks else "") + "+abort"
        scenarios.append(Scenario(name, policy, kv_batches=3, batch_pages=1, ticks=ticks, aborts=1))
    return {s.name: s for s in scenarios}


# The scenarios the conformance suite explores, by name (replay messages name them).
SCENARIOS: dict[str, Scenario] = _catalogue()
