"""The explorer's two rank-side scenarios, by name, in the multi-rank suite's registry.

Registered here, by importing this module, rather than listed in
conformance/multirank/scenarios.py, whose rank side the explorer builds on
(a listing there would import it back). The parent imports this module
before it names the scenarios; a rank imports it before it runs them (the
launch's preload).
"""

from __future__ import annotations

from typing import Any, Mapping

from conformance.multirank.explore.model import EXPLORE_SCENARIO, SCHEDULE_SCENARIO
from conformance.multirank.scenarios import SCENARIOS

MODULE = __name__


def explore(ctx: Any, scenario: Mapping[str, Any], only: str | None = None) -> None:
    """Every schedule of a cross-rank scenario, one after another in this launch (ranks.py)."""
    from conformance.multirank.explore.ranks import explore_on_ranks

    explore_on_ranks(ctx, scenario, only)


def one_schedule(ctx: Any, scenario: str, schedule: str) -> None:
    """One schedule (its name and text label the rank's heartbeat); what it runs, the exploration set on ctx."""
    from conformance.multirank.explore.schedule import explored_schedule

    explored_schedule(ctx, *ctx.exploration)


SCENARIOS[EXPLORE_SCENARIO] = explore
SCENARIOS[SCHEDULE_SCENARIO] = one_schedule
