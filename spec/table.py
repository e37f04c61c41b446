"""The decision table: every combination of the decision's inputs and the outcome."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from spec.decision import (
    DecisionState,
    collectives_per_check,
    completion_level,
    decide,
    enumerate_states,
    local_vote,
    pool_state,
    vote_clause,
)

COLUMNS = ("policy", "hit pages", "KV done", "timed out", "pool transfers", "terminated", "vote", "clause", "decision (1 rank)", "collectives")


@dataclass(frozen=True)
class Row:
    state: DecisionState

    def cells(self) -> tuple[str, ...]:
        s = self.state
        return (
            s.policy.value,
            str(s.hit_pages),
            completion_level(s),
            _yes_no(s.timed_out),
            pool_state(s),
            _yes_no(s.terminated),
            _yes_no(local_vote(s)),
            vote_clause(s),
            _decision(s),
            str(collectives_per_check(s.policy)),
        )


def rows(page_size: int = 4) -> Iterator[Row]:
    for state in enumerate_states(page_size):
        yield Row(state)


def render_text(page_size: int = 4) -> str:
    body = [r.cells() for r in rows(page_size)]
    widths = [max(len(COLUMNS[i]), *(len(row[i]) for row in body)) for i in range(len(COLUMNS))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in body]
    return "\n".join(lines) + "\n"


def render_markdown(page_size: int = 4) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(r.cells()) + " |" for r in rows(page_size)]
    return "\n".join(lines) + "\n"


def _decision(state: DecisionState) -> str:
    if not decide([state]):
        return "wait"
    return "terminate" if local_vote(state) else "terminate (X1)"


def _yes_no(flag: bool) -> str:
    return "yes" if flag else "no"
