"""Process groups: which ones a cache reduces its votes over, and how the trace names them.

Upstream reduces a vote over several groups: each attention group
(context-parallel, then tensor-parallel) larger than one rank, or, when there
is none, the tensor-parallel group when it has more than one rank
(`_all_reduce_attn_groups`). Over groups that form a grid (every cp group
meets every tp group in one rank) one reduce per group gives every rank the
reduce over all of them. A COLLECTIVE event names its group with a label
`<kind>:<r0>,<r1>,...` (the kind and its members' global ranks, ascending);
an event without one ran on the implementation's single group, which spans
every rank of the trace set.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from spec.errors import ConfigError

KINDS = ("tp", "attn_tp", "attn_cp")
# Rules for the vote groups (X2): "attention" is hiradix's and unified's, "tp" hi_mamba's.
ATTENTION_RULE = "attention"
TP_RULE = "tp"
RULES = (ATTENTION_RULE, TP_RULE)


def group_label(kind: str, ranks: Sequence[int]) -> str:
    """How the trace names the group of `kind` whose members are these global ranks."""
    if kind not in KINDS:
        raise ConfigError("group kind", kind, "one of " + ", ".join(KINDS))
    members = sorted({int(r) for r in ranks})
    if not members or any(r < 0 for r in members):
        raise ConfigError(f"{kind} ranks", list(ranks), "one or more global ranks >= 0")
    return f"{kind}:{','.join(map(str, members))}"


def group_members(label: str | None) -> tuple[int, ...] | None:
    """The global ranks of a labelled group; None for an unlabelled collective (every rank)."""
    if label is None:
        return None
    kind, _, ranks = label.partition(":")
    try:
        members = tuple(int(r) for r in ranks.split(","))
    except ValueError:
        members = ()
    if kind not in KINDS or not members:
        raise ConfigError("group", label, "'<kind>:<r0>,<r1>,...' with kind one of " + ", ".join(KINDS))
    return members


def vote_group_kinds(sizes: Mapping[str, int], rule: str = ATTENTION_RULE) -> list[str]:
    """X2: the groups, in order, one vote collective runs on each (sizes: kind -> ranks; absent: no such group).

    attention: every attention group (attn_cp, then attn_tp) larger than one
    rank; if none, tp when larger than one rank. tp: tp when larger than one rank.
    """
    unknown = sorted(set(sizes) - set(KINDS))
    if unknown:
        raise ConfigError("groups", unknown, "kinds drawn from " + ", ".join(KINDS))
    if rule not in RULES:
        raise ConfigError("vote group rule", rule, " or ".join(RULES))
    larger = [kind for kind in ("attn_cp", "attn_tp") if sizes.get(kind, 1) > 1] if rule == ATTENTION_RULE else []
    if larger:
        return larger
    return ["tp"] if sizes.get("tp", 1) > 1 else []
