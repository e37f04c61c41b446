"""What an adapter declares about the implementation it runs: its architecture profile and its deployment, with evidence.

Optional adapter attributes (conformance/ADAPTERS.md, "Declarations"):

    profile: str                      one of spec.profiles.PROFILES (default: the spec's own, fenced_vote)
    profile_evidence: Sequence[str]   where the implementation's code decides as the profile says ("path:line: text")
    deployment: Mapping[str, tuple[bool, Sequence[str]]]
                                      spec.preconditions id -> (whether the deployment produces it, evidence)
    vote_group_rule: str              one of spec.groups.RULES: the groups its votes are reduced over (X2;
                                      default: the spec's, attention)
    vote_group_evidence: Sequence[str] where its code says so

A precondition the adapter does not state is assumed to hold: the scenarios
assuming it judge the implementation. A verdict on code nobody here wrote
follows from these declarations and the clause kinds alone, never from a
list of expected results per target.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from spec.clauses import CATALOGUE
from spec.errors import ConfigError
from spec.groups import ATTENTION_RULE, RULES
from spec.preconditions import PRECONDITIONS
from spec.profiles import PROFILES, Profile, profile as find_profile


@dataclass(frozen=True)
class Declarations:
    profile: Profile
    profile_evidence: tuple[str, ...] = ()
    # precondition -> (produced, evidence); absent: assumed produced
    deployment: Mapping[str, tuple[bool, tuple[str, ...]]] = field(default_factory=dict)
    profile_declared: bool = True
    vote_group_rule: str = ATTENTION_RULE
    vote_group_evidence: tuple[str, ...] = ()

    def unmet(self, preconditions: Sequence[str]) -> list[tuple[str, tuple[str, ...]]]:
        """The preconditions among `preconditions` that this deployment does not produce, with the evidence."""
        return [(p, self.deployment[p][1]) for p in preconditions if p in self.deployment and not self.deployment[p][0]]

    def not_applicable(self, clauses: Sequence[str]) -> list[str]:
        return [c for c in clauses if not CATALOGUE[c].applies_to(self.profile.id)]

    def as_json(self) -> dict:
        return {
            "profile": self.profile.id, "profile_title": self.profile.title, "profile_declared": self.profile_declared,
            "profile_evidence": list(self.profile_evidence),
            "deployment": {p: {"produced": produced, "evidence": list(evidence)} for p, (produced, evidence) in sorted(self.deployment.items())},
        }


def _evidence(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ConfigError(where, value, "a list of non-empty strings (a file and line of the implementation's code each)")
    return tuple(value)


def declarations(adapter: Any) -> Declarations:
    """The adapter's declarations, validated (one ConfigError line for a bad one)."""
    name = getattr(adapter, "name", repr(adapter))
    declared = getattr(adapter, "profile", None)
    try:
        profile = find_profile(declared)
    except ConfigError:
        raise ConfigError(f"adapter {name} profile", declared, "one of spec.profiles.PROFILES: " + ", ".join(PROFILES)) from None
    evidence = _evidence(getattr(adapter, "profile_evidence", ()) or (), f"adapter {name} profile_evidence")
    raw = getattr(adapter, "deployment", None) or {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"adapter {name} deployment", raw, "a mapping of precondition id -> (produced, evidence)")
    deployment: dict[str, tuple[bool, tuple[str, ...]]] = {}
    for key, value in raw.items():
        if key not in PRECONDITIONS:
            raise ConfigError(f"adapter {name} deployment", key, "a precondition of spec.preconditions: " + ", ".join(PRECONDITIONS))
        if not (isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], bool)):
            raise ConfigError(f"adapter {name} deployment[{key!r}]", value, "(produced: bool, evidence: list of strings)")
        deployment[key] = (value[0], _evidence(value[1], f"adapter {name} deployment[{key!r}] evidence"))
    rule = getattr(adapter, "vote_group_rule", None) or ATTENTION_RULE
    if rule not in RULES:
        raise ConfigError(f"adapter {name} vote_group_rule", rule, "one of spec.groups.RULES: " + ", ".join(RULES))
    rule_evidence = _evidence(getattr(adapter, "vote_group_evidence", ()) or (), f"adapter {name} vote_group_evidence")
    return Declarations(profile, evidence, deployment, profile_declared=declared is not None,
                        vote_group_rule=rule, vote_group_evidence=rule_evidence)

