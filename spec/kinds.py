"""Clause kinds: what breaking a clause means for the implementation that broke it.

A finding on someone else's code is a bug report. Whether it is one depends
first on what the clause is about: behaviour every implementation owes its
users (safety, liveness, agreement), a practice stricter than a design has to
be (hardening), or how one architecture reaches its decision (mechanism,
judged only for implementations of that architecture: spec/profiles.py).
"""

from __future__ import annotations

from enum import Enum


class Kind(str, Enum):
    SAFETY = "safety"
    LIVENESS = "liveness"
    AGREEMENT = "agreement"
    HARDENING = "hardening"
    MECHANISM = "mechanism"

    @property
    def behavioural(self) -> bool:
        """Owed by every design: a failure is a defect wherever the scenario can happen."""
        return self in (Kind.SAFETY, Kind.LIVENESS, Kind.AGREEMENT)


KIND_MEANINGS = {
    Kind.SAFETY: "what users see when it breaks is wrong data or lost slots: no slot exposed under IO, loaded bytes are the bytes this configuration stored, every slot ends exactly once",
    Kind.LIVENESS: "a wait ends within its bound; a failure ends its transfer, not the machinery",
    Kind.AGREEMENT: "every rank commits the same",
    Kind.HARDENING: "stricter than a design must be to be correct (validation, checksums, a bound on a read, no wasted read, a timeout cap); a failure is a hardening gap, not a defect",
    Kind.MECHANISM: "how one architecture makes the decision (the vote per check, its reduce, the guard's place; the ACK drain's vote and timer); judged only for implementations declaring that architecture",
}
