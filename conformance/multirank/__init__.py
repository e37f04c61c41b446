"""Real multi-rank runs: one process per rank over torch.distributed.

The parent (a pytest worker) hosts a TCP store on 127.0.0.1 at a port the OS
picks at run time, starts world_size processes and waits for them within a
bound. Each rank joins a process group (gloo on CPU, nccl with one GPU per
rank), creates caches through the adapter with env.process_group set, runs a
list of scenarios in one launch (process start-up dominates; the group is
reused) and writes its traces and observations to a file the parent reads.

Modules, so that the parent never loads what only a rank runs:
- records: what travels to and from the ranks (the plan, the scenarios, the results);
- launch: starting and supervising the ranks, and reading what they wrote;
- checks: what the parent requires of every scenario across ranks (its oracle);
- rank: the rank process (heartbeat, IO valve, cache handles, scenario runner);
- scenarios: request data and the scenario functions every rank runs.

Only the adapter protocol is used to reach an implementation.
"""

from conformance.multirank.checks import expected_commit_pages, same_usable_prefix_problems, scenario_problems
from conformance.multirank.launch import (LaunchResult, MultiRankError, TriggerNotProduced, cuda_devices_needed, first_divergence, launch,
                                          run_or_fail)
from conformance.multirank.records import AdapterRef, CheckRecord, Launch, LoadRecord, RankScenarioResult, Scenario, ScenarioOutcome, adapter_ref
from conformance.multirank.scenarios import LEVELS, ORDER_PAIRS, REQUEST_PAGES, SCENARIOS, order_cases, staggered_level

__all__ = [
    "LEVELS",
    "ORDER_PAIRS",
    "REQUEST_PAGES",
    "SCENARIOS",
    "AdapterRef",
    "CheckRecord",
    "Launch",
    "LaunchResult",
    "LoadRecord",
    "MultiRankError",
    "RankScenarioResult",
    "Scenario",
    "ScenarioOutcome",
    "adapter_ref",
    "cuda_devices_needed",
    "expected_commit_pages",
    "first_divergence",
    "launch",
    "order_cases",
    "run_or_fail",
    "TriggerNotProduced",
    "same_usable_prefix_problems",
    "scenario_problems",
    "staggered_level",
]
