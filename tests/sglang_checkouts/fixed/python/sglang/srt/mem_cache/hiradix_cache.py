# Hand-written in the shape of SGLang's HiRadixCache (test data; never imported).
import logging
import time

import torch

from sglang.srt.mem_cache.radix_cache import RadixCache

logger = logging.getLogger(__name__)


class HiRadixCache(RadixCache):
    def __init__(self, params, server_args):
        self.page_size = params.page_size
        self.tp_group = params.tp_cache_group
        self.attn_cp_group = params.attn_cp_cache_group
        self.attn_tp_group = params.attn_tp_cache_group
        self.tp_world_size = torch.distributed.get_world_size(group=self.tp_group)
        self.prefetch_timeout_config = server_args.prefetch_timeout_config
        # The timeout rule is chosen once, here.
        self.is_prefetch_timeout = self._prefetch_timeout_check_linear_func
        self.prefetch_stop_policy = server_args.hicache_storage_prefetch_policy

    def _all_reduce_attn_groups(self, tensor: torch.Tensor, op):
        done = False
        for group in (self.attn_cp_group, self.attn_tp_group):
            if group is not None and torch.distributed.get_world_size(group=group) > 1:
                torch.distributed.all_reduce(tensor, op=op, group=group)
                done = True
        if not done and self.tp_world_size > 1:
            torch.distributed.all_reduce(tensor, op=op, group=self.tp_group)

    def _prefetch_timeout_check_linear_func(self, operation: "PrefetchOperation") -> bool:
        config = self.prefetch_timeout_config
        tokens = len(operation.hash_value) * self.page_size
        limit = min(config.max, config.base + config.per_ki_token * tokens / 1024)
        return time.monotonic() - operation.start_time > limit

    def can_terminate_prefetch(self, operation: "PrefetchOperation"):
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
            return True  # a policy nobody knows: stop waiting

        # Side pools are read after KV: do not stop while they are.
        if completed and getattr(operation, "pool_transfers", None) and not getattr(operation, "pool_transfers_done", True):
            can_terminate = False

        operation_terminated = operation.is_terminated()
        states = torch.tensor([1 - int(can_terminate), int(operation_terminated)], dtype=torch.int)
        self._all_reduce_attn_groups(states, torch.distributed.ReduceOp.MAX)
        can_terminate = states[0].item() == 0
        operation_terminated = states[1].item() == 1
        return can_terminate or operation_terminated

    def check_prefetch_progress(self, req_id):
        # Not part of the decision: the shim must never read this.
        entry = self.ongoing_prefetch[req_id]
        return self.cache_controller.terminate_prefetch(entry)
