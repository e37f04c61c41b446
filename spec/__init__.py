"""The executable prefetch-termination spec.

Depends on nothing else in this project. See spec/SPEC.md (generated) for the
clauses, the decision table and the trace contract.
"""

from spec.clauses import CATALOGUE, WINDOWS, Clause, clause
from spec.clock import Clock, ManualClock, MonotonicClock
from spec.config import Policy, TerminationConfig
from spec.decision import (
    DecisionState,
    collectives_per_check,
    combine,
    combine_payloads,
    decide,
    enumerate_states,
    is_completed,
    local_vote,
    vote_payload,
)
from spec.errors import ConfigError
from spec.fence import HitPolicy, PoolProgress, agreed_pages, commit_payload, committable_pages, dispose_slots, read_commit, trailing_attached
from spec.invariants import Violation, check
from spec.timeout import is_timed_out, timeout_budget
from spec.trace import Event, EventKind, NullRecorder, Trace, TraceRecorder

__all__ = [
    "CATALOGUE", "WINDOWS", "Clause", "clause",
    "Clock", "ManualClock", "MonotonicClock",
    "Policy", "TerminationConfig", "ConfigError",
    "DecisionState", "collectives_per_check", "combine", "combine_payloads", "decide",
    "enumerate_states", "is_completed", "local_vote", "vote_payload",
    "HitPolicy", "PoolProgress", "agreed_pages", "commit_payload", "committable_pages", "dispose_slots", "read_commit", "trailing_attached",
    "Violation", "check", "is_timed_out", "timeout_budget",
    "Event", "EventKind", "NullRecorder", "Trace", "TraceRecorder",
]
