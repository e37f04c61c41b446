"""abort_path_tells_cache_nothing: hiradix behind a scheduler with two abort paths, one of which forgets the cache.

An abort the scheduler receives releases the request's prefetch. A request
dropped from the waiting queue for a higher-priority one is taken out of the
queue and never mentioned to the cache: its prefetch goes on loading every
remaining batch into host slots nobody will read (the cache frees them only
when it closes).

Must be caught by: S2 (conformance/suite/test_abort_paths.py,
test_every_scheduler_abort_path_stops_the_prefetch_and_returns_every_slot).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from caches.adapters import ABORT_PATHS, CacheSession
from caches.variants._adapter import VariantAdapter, variant_of
from caches.hiradix import HiRadixCache

RECEIVED, PREEMPTED = "release_aborted_request", "abort_on_queued_limit"


class SchedulerPathsSession(CacheSession):
    def abort_by(self, request_id: str, path: str) -> None:
        if path == RECEIVED:
            self.abort(request_id)
        # PREEMPTED: the defect: out of the waiting queue, and the cache is told nothing


@dataclass(frozen=True)
class SchedulerPathsAdapter(VariantAdapter):
    @property
    def abort_paths(self) -> Mapping[str, str]:
        return {**ABORT_PATHS, PREEMPTED: f"the scheduler's {PREEMPTED} drops the waiting request and tells the cache nothing"}

    def create(self, env: Any) -> SchedulerPathsSession:
        return SchedulerPathsSession(super().create(env).cache)


def abort_path_tells_cache_nothing() -> SchedulerPathsAdapter:
    base = variant_of("hiradix", "abort_path_tells_cache_nothing", HiRadixCache)
    return SchedulerPathsAdapter(base.name, base.default_extra_pools, base.capabilities, variant_class=HiRadixCache)
