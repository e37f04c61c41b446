# Hand-written in the shape of SGLang's UnifiedRadixCache (test data; never imported).
import time
from typing import Optional

import torch

from sglang.srt.mem_cache.base_prefix_cache import BasePrefixCache


class UnifiedRadixCache(BasePrefixCache):
    def __init__(self, params):
        self.page_size = params.page_size
        self.tp_group = params.tp_cache_group
        self.attn_cp_group = params.attn_cp_cache_group
        self.attn_tp_group = params.attn_tp_cache_group
        self.tp_world_size = 1 if self.tp_group is None else torch.distributed.get_world_size(group=self.tp_group)
        self.prefetch_stop_policy = "best_effort"
        self.prefetch_timeout_base = 1.0
        self.prefetch_timeout_per_page = 0.25

    def _apply_storage_runtime_config(self, prefetch_timeout_base: float, prefetch_timeout_per_ki_token: float) -> None:
        self.prefetch_timeout_base = prefetch_timeout_base
        self.prefetch_timeout_per_page = self.page_size / 1024 * prefetch_timeout_per_ki_token

    def _all_reduce_attn_groups(self, tensor: torch.Tensor, op) -> None:
        reduced = False
        for group in (self.attn_cp_group, self.attn_tp_group):
            if group is not None and torch.distributed.get_world_size(group=group) > 1:
                torch.distributed.all_reduce(tensor, op=op, group=group)
                reduced = True
        if not reduced and self.tp_world_size > 1:
            torch.distributed.all_reduce(tensor, op=op, group=self.tp_group)

    def _prefetch_timeout_check_linear_func(self, operation) -> bool:
        # No cap: the budget grows with the hit.
        budget = self.prefetch_timeout_base + len(operation.hash_value) * self.prefetch_timeout_per_page
        return time.monotonic() - operation.start_time > budget

    def can_terminate_prefetch(self, operation) -> bool:
        if self.prefetch_stop_policy == "best_effort":
            return True

        completed = len(operation.hash_value) > 0 and (
            operation.completed_tokens == len(operation.hash_value) * self.page_size
        )
        if self.prefetch_stop_policy == "wait_complete":
            can_terminate = completed
        elif self.prefetch_stop_policy == "timeout":
            can_terminate = completed or self._prefetch_timeout_check_linear_func(operation)
        else:
            return True
        if completed and getattr(operation, "pool_transfers", None) and not getattr(operation, "pool_transfers_done", True):
            can_terminate = False

        states = torch.tensor([1 - int(can_terminate), int(operation.is_terminated())], dtype=torch.int)
        self._all_reduce_attn_groups(states, torch.distributed.ReduceOp.MAX)
        return states[0].item() == 0 or states[1].item() == 1

    def evictable_size(self) -> Optional[int]:
        return self.tree_components[0].evictable_size()
