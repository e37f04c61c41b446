"""Divergences: where an upstream design differs from this spec by intent, not by mistake.

A divergence is judged apart from a defect. The spec keeps its own rule (and
the conformance run still reports the behaviour, with the clause it breaks),
but a failure that is exactly the documented upstream design is a divergence
verdict, shown with both sides' evidence and never counted among the defects.
Anything else that breaks the same clause stays a defect.

The recognizer is the state, never the target: the same behaviour gets the
same verdict on every implementation, whatever profile it declares.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from spec.config import Policy
from spec.decision import DecisionState
from spec.profiles import kv_landed, pool_pending


@dataclass(frozen=True)
class Divergence:
    id: str
    clauses: tuple[str, ...]  # the clauses the upstream design breaks, by intent
    title: str
    spec_rule: str
    upstream_rule: str
    upstream_evidence: tuple[str, ...]  # upstream's code, at the line that keeps its rule
    spec_evidence: tuple[str, ...]  # what argues the spec's side (reports, proposals)


LANDED_KV_WAITS = Divergence(
    id="landed-kv-waits",
    clauses=("D5", "L2", "A1"),
    title="past its deadline, a wait whose KV has landed holds for a pending sidecar read",
    spec_rule="D3 keys the extra-pool guard on completion, and D5 votes yes once the deadline has passed, whatever is still "
              "pending: the timeout bounds every wait, and the fence (F1-F11) commits only the pages every pool loaded, so the "
              "cut sidecar read costs a recompute of its pages, never a wrong byte.",
    upstream_rule="Upstream holds the wait while KV is complete and a sidecar transfer is pending, past the deadline, for as long "
                  "as that transfer runs: the fork's guard forces the vote (`if completed and <pool transfers pending>: "
                  "can_terminate = False`, after the policy branches), and 0.5.2x's drain never lets the deadline expire once "
                  "KV has landed (\"cutting the pending sidecar read would salvage nothing\").",
    upstream_evidence=(
        "fork 9e9fde147 mem_cache/hiradix_cache.py:1345-1350: HiRadixCache.can_terminate_prefetch (the guard of PR #27550)",
        "0.5.23 mem_cache/unified_radix_cache.py: UnifiedRadixCache._prefetch_deadline_expired (\"KV landed\")",
    ),
    spec_evidence=(
        "issue #35012: a user's report of the wait this holds",
        "PR #35181 (open): a proposal to let the timeout end it",
    ),
)

DIVERGENCES = {d.id: d for d in (LANDED_KV_WAITS,)}

# How a failure line says its state is a divergence: checks append it, the report reads it.
MARKER = re.compile(r"\(divergence ([a-z0-9-]+)\)")


def marker(divergence: Divergence) -> str:
    return f"(divergence {divergence.id})"


def explains(state: DecisionState | None, voted: bool | None) -> Divergence | None:
    """The divergence a vote of `voted` in `state` is, if it is exactly a documented upstream design."""
    if state is None or voted is not False:
        return None
    if state.policy is Policy.TIMEOUT and state.timed_out and kv_landed(state) and pool_pending(state):
        return LANDED_KV_WAITS
    return None


def suffix(state: DecisionState | None, voted: bool | None) -> str:
    """' (divergence ID)' for a failure line whose state is a divergence, else ''."""
    found = explains(state, voted)
    return f" {marker(found)}" if found else ""
