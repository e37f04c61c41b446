"""The rules' example code, written once: SGLang's fork's HiRadixCache
`can_terminate_prefetch` (the vote per check, reduced across the TP group) in
parts, and the guard lines the examples put into it. Each rule's VALID and
INVALID examples are composed from these (lint/rules/*.py), so that the method
an example means, with its guard in one place or another, is the same method
in every rule."""

from __future__ import annotations

IMPORTS = "\nimport time\nimport torch\n\n\n"  # GUARDED's header
TORCH = "\nimport torch\n\n\n"

HEAD = '''    def can_terminate_prefetch(self, operation):
        can_terminate = True
        if self.prefetch_stop_policy == "best_effort":
            return can_terminate
'''

COMPLETED = '''        if len(operation.hash_value) == 0:
            completed = False
        else:
            completed = operation.completed_tokens == len(operation.hash_value) * self.page_size
'''

POLICIES = '''        if self.prefetch_stop_policy == "wait_complete":
            can_terminate = completed
        elif self.prefetch_stop_policy == "timeout":
            can_terminate = completed or self._timed_out(operation)
'''

TP_REDUCE = '''        operation_terminated = operation.is_terminated()
        if self.tp_world_size > 1:
            states = torch.tensor([1 - int(can_terminate), int(operation_terminated)], dtype=torch.int)
            torch.distributed.all_reduce(states, op=torch.distributed.ReduceOp.MAX, group=self.tp_group)
            can_terminate = states[0].item() == 0
            operation_terminated = states[1].item() == 1
'''

TAIL = '''        can_terminate = can_terminate or operation_terminated
        return can_terminate
'''

# The spec's guard as the fork spells it, through getattr (pool fields may be absent).
GETATTR_GUARD = '''        if completed and getattr(operation, "pool_transfers", None) and not getattr(
            operation, "pool_transfers_done", True
        ):
            completed = False
'''


def guard_line(forces: str, key: str = "completed") -> str:
    """A guard on plain attributes: keyed on `key`, it forces `forces` to False."""
    return (f"        if {key} and operation.pool_transfers and not operation.pool_transfers_done:\n"
            f"            {forces} = False\n")


def hiradix(before_policies: str = "", before_reduce: str = "", after_reduce: str = "") -> str:
    """The fork's method, with lines put in before the policy branches (where the
    spec's guard goes), before the reduce (upstream's) or after it (too late)."""
    return HEAD + COMPLETED + before_policies + POLICIES + before_reduce + TP_REDUCE + after_reduce + TAIL


# A minimal single-rank method, for examples about one statement: its completion predicate, then theirs.
PREDICATE = "        completed = op.completed_tokens == len(op.hash_value) * self.page_size\n"
SMALL = "\nclass Cache:\n    def can_terminate_prefetch(self, op):\n" + PREDICATE

# The guarded fork method, the spec's form: every rule's first valid example.
GUARDED = IMPORTS + "class HiRadixCache:\n" + hiradix(before_policies=GETATTR_GUARD)
