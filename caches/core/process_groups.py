"""The vote groups of a cache: several torch.distributed groups, one reduce over each, as upstream does.

A cache may take `process_groups`: for each group kind (tp, attn_tp, attn_cp;
spec/groups.py) the partition of the global ranks into groups of that kind,
e.g. four ranks as 2x2: {"attn_tp": [[0, 1], [2, 3]], "attn_cp": [[0, 2], [1, 3]]}.
From the sizes of this rank's groups and the cache's rule (X2), the vote
group kinds follow; every collective of the cache (hit, vote, commit,
backup acks) then runs once on each of them, in order, recording the
group's label. Over groups forming a grid that gives every rank the reduce
over all ranks. Every rank creates every group of the chosen kinds, in the
same order (torch.distributed requires it); the prefetch thread gets copies
of its own, as with one group.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

from caches.core.reducer import LocalReducer, Reducer, TorchDistReducer
from spec.errors import ConfigError, bounded_repr
from spec.groups import KINDS, group_label, vote_group_kinds
from spec.trace import TraceRecorder


class GroupedReducer:
    """One reduce per vote group, in order: the MAX (MIN) over every rank the groups connect."""

    def __init__(self, reducers: Sequence[TorchDistReducer], *, rank: int, world_size: int) -> None:
        self.reducers = list(reducers)
        self.rank = rank
        self.world_size = world_size

    def all_reduce_max(self, values: Sequence[int], *, name: str, op: str | None = None, step: int | None = None) -> list[int]:
        out = [int(v) for v in values]
        for reducer in self.reducers:
            out = reducer.all_reduce_max(out, name=name, op=op, step=step)
        return out

    def all_reduce_min(self, values: Sequence[int], *, name: str, op: str | None = None, step: int | None = None) -> list[int]:
        out = [int(v) for v in values]
        for reducer in self.reducers:
            out = reducer.all_reduce_min(out, name=name, op=op, step=step)
        return out

    def __repr__(self) -> str:
        return f"GroupedReducer(rank={self.rank}, groups={[r.label for r in self.reducers]})"


def checked_partitions(partitions: Any, world_size: int) -> dict[str, list[list[int]]]:
    """Each kind's groups must split the ranks 0..world_size-1 exactly, each rank in one group."""
    accepted = f"a mapping of kinds ({', '.join(KINDS)}) to lists of rank lists that split ranks 0..{world_size - 1}"
    if not isinstance(partitions, Mapping) or not partitions:
        raise ConfigError("process_groups", partitions, accepted)
    out: dict[str, list[list[int]]] = {}
    for kind, groups in partitions.items():
        if kind not in KINDS:
            raise ConfigError("process_groups", kind, "group kinds among " + ", ".join(KINDS))
        try:
            members = [sorted(int(r) for r in group) for group in groups]
        except (TypeError, ValueError):
            raise ConfigError(f"process_groups[{bounded_repr(kind)}]", groups, accepted) from None
        if sorted(r for group in members for r in group) != list(range(world_size)) or any(not group for group in members):
            raise ConfigError(f"process_groups[{bounded_repr(kind)}]", groups, accepted)
        out[kind] = members
    return out


def build_group_reducers(partitions: Any, rule: str, device: torch.device, trace: TraceRecorder) -> tuple[Reducer, Reducer, list[Any]]:
    """(the scheduler's reducer, the prefetch thread's reducer, groups created here to destroy at close)."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        raise ConfigError("process_groups", partitions, "groups of an initialized torch.distributed default group")
    rank, world = dist.get_rank(), dist.get_world_size()
    by_kind = checked_partitions(partitions, world)
    mine = {kind: next(group for group in groups if rank in group) for kind, groups in by_kind.items()}
    kinds = vote_group_kinds({kind: len(group) for kind, group in mine.items()}, rule)
    if not kinds:
        return LocalReducer(), LocalReducer(), []
    backend = dist.get_backend()
    on = device if backend == "nccl" else torch.device("cpu")
    scheduler, prefetch, own = [], [], []
    for kind in kinds:
        for group in by_kind[kind]:  # every rank creates every group, in one order
            pair = [dist.new_group(ranks=group, backend=backend) for _ in range(2)]
            if rank in group:
                label = group_label(kind, group)
                scheduler.append(TorchDistReducer(pair[0], trace, device=on, label=label))
                prefetch.append(TorchDistReducer(pair[1], trace, device=on, label=label))
                own += pair
    return GroupedReducer(scheduler, rank=rank, world_size=world), GroupedReducer(prefetch, rank=rank, world_size=world), own


def build_kind_reducers(partitions: Any, device: torch.device, trace: TraceRecorder,
                        reducer: Reducer) -> tuple[dict[str, Reducer], list[Any]]:
    """One reducer per group kind given, over this rank's group of that kind, whatever the cache's rule:
    for code that picks its own groups (upstream's decision, which reduces over attn_cp, attn_tp or tp as
    its class does). A kind the cache's own `reducer` already reduces over is that reducer's group, so a
    decision on the class's groups meets its peers' other collectives there; a decision on another kind
    runs where no peer's collective of the cache does. Returns (kind -> reducer, groups created here)."""
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    by_kind = checked_partitions(partitions, world)
    backend = dist.get_backend()
    on = device if backend == "nccl" else torch.device("cpu")
    reducers: dict[str, Reducer] = {}
    own: list[Any] = []
    ours = {r.label.partition(":")[0]: r for r in getattr(reducer, "reducers", ()) if r.label}
    for kind in KINDS:
        if kind in ours:  # the same kinds on every rank (one rule over one layout): no group to create
            reducers[kind] = ours[kind]
            continue
        for group in by_kind.get(kind, ()):  # every rank creates every group, in one order
            handle = dist.new_group(ranks=group, backend=backend)
            if rank in group:
                reducers[kind] = TorchDistReducer(handle, trace, device=on, label=group_label(kind, group))
                own.append(handle)
    return reducers, own
