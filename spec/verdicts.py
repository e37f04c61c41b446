"""Verdicts: what a clause's outcome on one implementation means, from the clause's kind and the declared profile.

A conformance run gives each (implementation, clause) an outcome: a test
failed naming the clause, a citing test failed first on another clause, every
citing test passed, every one was not judged (its scenario's preconditions do
not hold in the implementation's deployment), skipped, did not run, or none
cites it. The verdict a maintainer acts on follows from that outcome, the
clause's kind (spec/kinds.py) and the profile the implementation declares
(spec/profiles.py), never from a list of expected results per target:

- not applicable: a clause that judges other architectures only;
- defect: a failed behavioural clause, or a failed mechanism clause of the
  implementation's own profile;
- hardening: a failed hardening clause (stricter than the design must be);
- divergence: it failed only where upstream's documented design differs from
  the spec's by intent (spec/divergences.py): never counted as a defect;
- unverified: its tests failed first on another clause, so this one was not
  reached;
- not judged: every citing test assumed a precondition the deployment does
  not produce, or needed a capability the adapter does not declare;
- pass, expected failure, not run, uncovered: as the outcome says.
"""

from __future__ import annotations

from enum import Enum

from spec.clauses import Clause
from spec.errors import ConfigError
from spec.kinds import Kind


class Outcome(str, Enum):
    """A clause's outcome on one implementation and device, strongest first."""

    FAIL = "fail"
    DIVERGE = "diverge"  # failed, and every failure naming it is a documented upstream design (spec/divergences.py)
    FAIL_OTHER = "fail-other"
    XFAIL = "xfail"
    PASS = "pass"
    NOT_JUDGED = "not-judged"
    SKIP = "skip"
    NOT_RUN = "not-run"
    UNCOVERED = "uncovered"


class Verdict(str, Enum):
    DEFECT = "defect"
    HARDENING = "hardening"
    DIVERGENCE = "divergence"
    UNVERIFIED = "unverified"
    XFAIL = "xfail"
    PASS = "pass"
    NOT_APPLICABLE = "not-applicable"
    NOT_JUDGED = "not-judged"
    NOT_RUN = "not-run"
    UNCOVERED = "uncovered"


VERDICT_MEANINGS = {
    Verdict.DEFECT: "a behavioural clause (safety, liveness, agreement) or a mechanism clause of the declared profile failed: a bug report",
    Verdict.HARDENING: "a hardening clause failed: stricter than the design must be, a gap to close, not a defect",
    Verdict.DIVERGENCE: "the implementation follows a documented upstream design where the spec differs by intent "
                        "(spec/divergences.py): shown with both sides' evidence, not counted as a defect",
    Verdict.UNVERIFIED: "every test citing it that failed, failed first on another clause: this one was not reached",
    Verdict.XFAIL: "a test citing it failed as the implementation's expected-failure list says",
    Verdict.PASS: "every citing test that was judged passed",
    Verdict.NOT_APPLICABLE: "a mechanism of another architecture profile than the one the implementation declares",
    Verdict.NOT_JUDGED: "every citing test assumes of the deployment something the implementation's deployment does not produce, "
                        "or needs a capability the adapter does not declare",
    Verdict.NOT_RUN: "the device did not run here",
    Verdict.UNCOVERED: "no test cites it",
}

_SAME = {Outcome.XFAIL: Verdict.XFAIL, Outcome.PASS: Verdict.PASS, Outcome.NOT_JUDGED: Verdict.NOT_JUDGED,
         Outcome.SKIP: Verdict.NOT_JUDGED, Outcome.NOT_RUN: Verdict.NOT_RUN, Outcome.UNCOVERED: Verdict.UNCOVERED}


def verdict(clause: Clause, profile_id: str, outcome: Outcome | str) -> Verdict:
    """The verdict of one clause's outcome for an implementation declaring `profile_id`."""
    try:
        outcome = Outcome(outcome)
    except ValueError:
        raise ConfigError("outcome", outcome, ", ".join(o.value for o in Outcome)) from None
    if not clause.applies_to(profile_id):
        return Verdict.NOT_RUN if outcome is Outcome.NOT_RUN else Verdict.NOT_APPLICABLE
    if outcome is Outcome.FAIL:
        return Verdict.HARDENING if clause.kind is Kind.HARDENING else Verdict.DEFECT
    if outcome is Outcome.DIVERGE:
        return Verdict.DIVERGENCE
    if outcome is Outcome.FAIL_OTHER:
        return Verdict.UNVERIFIED
    return _SAME[outcome]
