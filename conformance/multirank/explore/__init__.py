"""Cross-rank exploration: every way ranks' local state can differ around their collectives, on real ranks.

The multi-rank suite's scenarios are written by hand; this explorer
enumerates them. Around one prefetch on every rank it makes each rank's local
state differ wherever a deployment can (the IO each rank has landed when a
check runs, its clock, a storage fault, what its storage holds, its host
tier's room, a rank-local abort), takes the checks and collectives as the
scheduler takes them, and judges every schedule with the multi-rank oracle,
which names the clause that broke. Ranks live for the whole exploration.

- model: scenarios, schedules as strings, what each state enables (the reduction);
- search: the depth-first search, the counts;
- catalogue: the scenarios by name;
- schedule, ranks, entry: the rank side (one schedule; the loop; the registration);
- run: the parent's side (explore, replay, the failure and its replay command).

`python -m conformance.multirank.explore --cache-impl MODULE:FACTORY --scenario NAME [--schedule S]`
explores a scenario, or replays one schedule, outside pytest.
"""

from conformance.multirank.explore.catalogue import SCENARIOS
from conformance.multirank.explore.model import CrossRankScenario, format_schedule, parse_schedule
from conformance.multirank.explore.run import (
    CrossRankExploration, CrossRankExplorationError, CrossRankReplayError, explore, replay, replay_command,
)

__all__ = [
    "SCENARIOS",
    "CrossRankExploration",
    "CrossRankExplorationError",
    "CrossRankReplayError",
    "CrossRankScenario",
    "explore",
    "format_schedule",
    "parse_schedule",
    "replay",
    "replay_command",
]
