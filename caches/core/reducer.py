"""Cross-rank reductions behind one interface.

Every collective an implementation runs goes through a Reducer, which records
a COLLECTIVE event first, so the trace shows what each rank entered (L3) even
when a peer never arrives and the group hangs.
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence

import torch

from spec.errors import ConfigError
from spec.trace import EventKind, TraceRecorder


class Reducer(Protocol):
    rank: int
    world_size: int

    def all_reduce_max(self, values: Sequence[int], *, name: str, op: str | None = None, step: int | None = None) -> list[int]: ...

    def all_reduce_min(self, values: Sequence[int], *, name: str, op: str | None = None, step: int | None = None) -> list[int]: ...


class LocalReducer:
    """One rank: a reduction is the identity, and nothing is recorded."""

    rank = 0
    world_size = 1

    def all_reduce_max(self, values: Sequence[int], *, name: str, op: str | None = None, step: int | None = None) -> list[int]:
        return [int(v) for v in values]

    def all_reduce_min(self, values: Sequence[int], *, name: str, op: str | None = None, step: int | None = None) -> list[int]:
        return [int(v) for v in values]

    def __repr__(self) -> str:
        return "LocalReducer()"


class TorchDistReducer:
    """torch.distributed all-reduce over one process group (gloo on CPU, nccl on CUDA).

    The tensor lives where the group's backend needs it: CPU for gloo, the
    rank's CUDA device for nccl.
    """

    def __init__(self, group: Any, trace: TraceRecorder, *, device: torch.device | str = "cpu", label: str | None = None) -> None:
        import torch.distributed as dist

        if not dist.is_available() or not dist.is_initialized():
            raise ConfigError("process_group", group, "a group of an initialized torch.distributed default group")
        self._dist = dist
        self.group = group
        self.trace = trace
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self.device = torch.device(device)
        # One of several vote groups (caches/core/process_groups.py): its trace label, '<kind>:<ranks>'.
        self.label = label

    def _reduce(self, values: Sequence[int], how: Any, name: str, op: str | None, step: int | None) -> list[int]:
        self.trace.record(EventKind.COLLECTIVE, value=name, op=op, step=step, group=self.label)
        tensor = torch.tensor([int(v) for v in values], dtype=torch.int64, device=self.device)
        self._dist.all_reduce(tensor, op=how, group=self.group)
        return [int(v) for v in tensor.tolist()]

    def all_reduce_max(self, values: Sequence[int], *, name: str, op: str | None = None, step: int | None = None) -> list[int]:
        return self._reduce(values, self._dist.ReduceOp.MAX, name, op, step)

    def all_reduce_min(self, values: Sequence[int], *, name: str, op: str | None = None, step: int | None = None) -> list[int]:
        return self._reduce(values, self._dist.ReduceOp.MIN, name, op, step)

    def __repr__(self) -> str:
        return f"TorchDistReducer(rank={self.rank}, world_size={self.world_size}, device='{self.device}')"
