# Hand-written in the shape of SGLang's HiMambaRadixCache (test data; never imported).
import time

import torch

from sglang.srt.mem_cache.mamba_radix_cache import MambaRadixCache


class HiMambaRadixCache(MambaRadixCache):
    def __init__(self, params, server_args):
        self.page_size = params.page_size
        self.tp_group = params.tp_cache_group
        self.tp_world_size = 1 if self.tp_group is None else torch.distributed.get_world_size(group=self.tp_group)
        self.prefetch_timeout_config = server_args.prefetch_timeout_config
        self.is_prefetch_timeout = self._prefetch_timeout_check_linear_func
        self.prefetch_stop_policy = server_args.hicache_storage_prefetch_policy

    def _prefetch_timeout_check_linear_func(self, operation):
        cfg = self.prefetch_timeout_config
        hit_tokens = len(operation.hash_value) * self.page_size
        return time.monotonic() - operation.start_time > min(cfg.max, cfg.base + cfg.per_ki_token * hit_tokens / 1024)

    def can_terminate_prefetch(self, operation):
        can_terminate = True
        if self.prefetch_stop_policy == "best_effort":
            return can_terminate

        if len(operation.hash_value) == 0:
            completed = False
        else:
            completed = operation.completed_tokens == len(operation.hash_value) * self.page_size

        if self.prefetch_stop_policy == "wait_complete":
            can_terminate = completed
        elif self.prefetch_stop_policy == "timeout":
            can_terminate = completed or self.is_prefetch_timeout(operation)
        else:
            return True

        # The mamba state lands after KV.
        if completed and operation.pool_transfers and not operation.pool_transfers_done:
            can_terminate = False

        operation_terminated = operation.is_terminated()
        if self.tp_world_size > 1:
            states = torch.tensor([1 - int(can_terminate), int(operation_terminated)], dtype=torch.int)
            torch.distributed.all_reduce(states, op=torch.distributed.ReduceOp.MAX, group=self.tp_group)
            can_terminate = states[0].item() == 0
            operation_terminated = states[1].item() == 1
        return can_terminate or operation_terminated
