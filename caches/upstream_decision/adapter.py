"""The conformance adapters for an SGLang checkout: `sglang:hiradix`, `sglang:unified_radix`, `sglang:hi_mamba_radix`.

`sglang_adapters(path)` is the factory `pytest conformance/ --sglang PATH`
calls (entry point group `hicache_conformance.checkout_adapters`, name
`sglang`; or `--sglang-shim caches.upstream_decision:sglang_adapters`). It
reads and checks every class's decision code once, so a name the shim does not
map stops the run with one error, and returns the adapters of the classes
found plus, for each class the checkout lacks, its name and why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from caches import adapters as builtin
from caches.adapters import CacheSession, config_for
from caches.upstream_decision.caches import UPSTREAM_DECISION_CACHES
from caches.upstream_decision.deployment import attention_cp_deployment
from caches.upstream_decision.names import ENTRY_METHOD, UPSTREAM_CLASSES
from caches.upstream_decision.source import ClassUnavailable, checkout_dir, extract

PREFIX = "sglang:"


@dataclass(frozen=True)
class UpstreamDecisionAdapter:
    """One upstream class's decision in the matching cache of ours. Picklable: ranks re-read the checkout."""

    name: str
    default_extra_pools: tuple[str, ...]
    capabilities: frozenset[str]
    checkout: str
    key: str
    # The checkout's own decision is a vote per check: the profile it is judged by, and where its code says so.
    profile: str = "vote_per_check"
    profile_evidence: tuple[str, ...] = ()
    # The groups its class reduces votes over (X2), read from the class's code (group_rule.py).
    vote_group_rule: str = "attention"
    vote_group_evidence: tuple[str, ...] = ()
    # Scenario preconditions the checkout's models say its deployment of the class does not produce (deployment.py).
    deployment: Mapping[str, tuple[bool, tuple[str, ...]]] = field(default_factory=dict)

    def create(self, env: Any) -> CacheSession:
        cls = UPSTREAM_DECISION_CACHES[self.key]
        upstream = extract(Path(self.checkout), self.key)
        groups = getattr(env, "process_groups", None)
        # Several vote groups (spec/groups.py): the cache creates and reduces over them, as upstream's _all_reduce_attn_groups does.
        where = {"process_groups": groups} if groups is not None else {"process_group": env.process_group}
        cache = cls(config_for(env), trace=env.trace, clock=env.clock, upstream=upstream, **where)
        return CacheSession(cache)

    # No configure(fields): C1/C2 concern the caller's configuration path, and
    # here that is ours, not upstream's; those tests skip, saying so.


def sglang_adapters(checkout: str | Path) -> tuple[list[UpstreamDecisionAdapter], list[tuple[str, str]]]:
    """(adapters of the classes found, [(adapter name, why it is missing)]) for one SGLang checkout."""
    root = Path(checkout).expanduser().resolve()
    checkout_dir(root)  # one error line when it is not a checkout
    adapters, missing = [], []
    for key in UPSTREAM_CLASSES:
        name = PREFIX + key
        try:
            decision = extract(root, key)  # reads and checks every name now, not in the middle of the run
        except ClassUnavailable as exc:
            missing.append((name, str(exc)))
            continue
        base = getattr(builtin, key)()
        entry = decision.methods[ENTRY_METHOD]
        evidence = (f"{decision.path}:{entry.lineno}: {decision.class_name}.{ENTRY_METHOD} casts the vote, "
                    f"reduced across ranks once per check (MAX of [1 - vote, terminated])",)
        rule, rule_evidence = decision.group_rule
        adapters.append(UpstreamDecisionAdapter(name, base.default_extra_pools, base.capabilities, str(root), key,
                                                profile_evidence=evidence, vote_group_rule=rule,
                                                vote_group_evidence=(rule_evidence,),
                                                deployment=attention_cp_deployment(root, key)))
    return adapters, missing
