"""The scheduler-drive seam: upstream's steps taken as its scheduler takes them, and the harness's own agreement across ranks.

Upstream's scheduler runs check_hicache_events once per step on every rank
(each call runs collectives), so every wait here takes the same steps on
every rank: until no rank has anything pending, agreed by a collective of
the harness's own (not upstream's, and not recorded in the trace).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from conformance.adapter import CacheEnv

ROUNDS = 200  # a bounded wait takes at most this many steps of wait_timeout_s / ROUNDS each


class Drive:
    def __init__(self, env: CacheEnv, group: Any) -> None:
        self.env = env
        self.group = group

    def any_rank(self, flag: bool) -> bool:
        """Whether `flag` holds on some rank."""
        return bool(self._reduce(int(flag), "MAX"))

    def min_over_ranks(self, value: int) -> int:
        return self._reduce(value, "MIN")

    def _reduce(self, value: int, op: str) -> int:
        if self.env.world_size == 1:
            return value
        import torch.distributed as dist

        agreed = torch.tensor([value], dtype=torch.int)
        dist.all_reduce(agreed, op=getattr(dist.ReduceOp, op), group=self.group)
        return int(agreed.item())

    def steps_until_settled(self, step: Callable[[], None], pending: Callable[[], bool], wait: Callable[[float], None]) -> bool:
        """step(), then, while `pending()` holds on some rank, wait(a slice of the bound) and step again; False at the bound."""
        for _ in range(ROUNDS):
            step()
            if not self.any_rank(pending()):
                return True
            wait(self.env.wait_timeout_s / ROUNDS)
        return False
