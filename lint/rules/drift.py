"""HC104: implementations linted together disagree on the protocol's structure."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Iterable

from lint.findings import Finding
from lint.protocol import FEATURE_NAMES
from lint.rules.base import GroupRule, Invalid
from lint.rules.examples import GETATTR_GUARD, hiradix

if TYPE_CHECKING:
    from lint.analysis import MethodAnalysis

ALIGNED = '''
import time

import torch


class HiRadixCache:
    def _timed_out(self, operation):
        tokens = len(operation.hash_value) * self.page_size
        limit = min(
            self.prefetch_timeout_max,
            self.prefetch_timeout_base + self.prefetch_timeout_per_ki_token * tokens / 1024,
        )
        return time.monotonic() - operation.start_time > limit

''' + hiradix(before_policies=GETATTR_GUARD) + '''

class UnifiedRadixCache:
    def can_terminate_prefetch(self, op):
        can_terminate = True
        if self.prefetch_stop_policy == "best_effort":
            return can_terminate
        kv_complete = bool(op.hash_value) and op.completed_tokens == len(op.hash_value) * self.page_size
        if kv_complete and op.pool_transfers and not op.pool_transfers_done:
            kv_complete = False
        if self.prefetch_stop_policy == "wait_complete":
            can_terminate = kv_complete
        elif self.prefetch_stop_policy == "timeout":
            budget = min(self.timeout_max, self.timeout_base + self.timeout_per_ki * len(op.hash_value) / 1024)
            can_terminate = kv_complete or self.clock.now() - op.start_time > budget
        terminated = op.is_terminated()
        vote_no, any_terminated = self.reducer.all_reduce_max(
            [1 - int(can_terminate), int(terminated)], name="prefetch_terminate"
        )
        return vote_no == 0 or any_terminated == 1


class HiMambaRadixCache:
    def __init__(self, base, per_ki, cap):
        self.timeout_limit = min(cap, base + per_ki)

    def can_terminate_prefetch(self, prefetch_op):
        if self.prefetch_stop_policy == "best_effort":
            return True
        is_done = self._prefetch_completed(prefetch_op)
        if is_done and prefetch_op.pool_transfers and not prefetch_op.pool_transfers_done:
            is_done = False
        can_terminate = False
        if self.prefetch_stop_policy == "wait_complete":
            can_terminate = is_done
        elif self.prefetch_stop_policy == "timeout":
            can_terminate = is_done or self.clock.now() - prefetch_op.start_time > self.timeout_limit
        terminated = prefetch_op.is_terminated()
        if self.world_size > 1:
            vote_no, terminated = self.reducer.all_reduce_max(
                [1 - int(can_terminate), int(terminated)], name="prefetch_terminate"
            )
            can_terminate = vote_no == 0
        return can_terminate or terminated
'''

UNCAPPED = ALIGNED.replace(
    "            budget = min(self.timeout_max, self.timeout_base + self.timeout_per_ki * len(op.hash_value) / 1024)\n",
    "            budget = self.timeout_base + self.timeout_per_ki * len(op.hash_value) / 1024\n",
)
MIN_REDUCE = ALIGNED.replace(
    "op=torch.distributed.ReduceOp.MAX", "op=torch.distributed.ReduceOp.MIN"
)


# The guard's own features are owned by HC101, HC102, HC103 and HC107: drift
# never repeats them. For the rest the spec says which value is right.
SPEC_VALUES = {
    "policies": "best_effort, wait_complete, timeout",
    "combine": "vote OR any-terminated",
    "reduce-op": "MAX",
    "reduce-payload": "[1-vote, terminated]",
    "timeout-cap": "capped by a max",
}
COMPARED = tuple(name for name in FEATURE_NAMES if not name.startswith("guard"))


class AlignmentDrift(GroupRule):
    """Each implementation writes the termination method in its own idiom, and
    that is fine; what must not differ is the normalized structure: which
    policies are handled, how the vote is combined with "already terminated",
    the reduce's op and payload, and whether the timeout is capped. Where
    implementations differ, the one that differs from the spec's value is
    reported (else the one that differs from the majority) at the differing
    element, naming the feature; a conforming implementation is never
    reported, and the guard itself is left to the guard rules. Methods whose
    configured check lives in the commit path are not compared."""

    code = "HC104"
    clauses = ("X1", "X2", "T1")
    name = "alignment-drift"
    summary = "termination methods linted together differ in normalized structure"

    VALID = (ALIGNED,)
    INVALID = (
        Invalid(UNCAPPED, line=52, message="'timeout-cap'"),
        Invalid(MIN_REDUCE, line=35, message="'reduce-op'"),
    )

    def check_group(self, methods: list["MethodAnalysis"]) -> Iterable[Finding]:
        active = [m for m in methods if m.skip_reason is None and m.guard_in_decision]
        if len(active) < 2:
            return
        for feature in COMPARED:
            values = [(m, m.features[feature]) for m in active if m.features[feature].value is not None]
            counts = Counter(f.value for _, f in values)
            if len(counts) < 2:
                continue
            total = len(values)
            top, top_count = counts.most_common(1)[0]
            spec = SPEC_VALUES.get(feature)
            if spec is not None and spec in counts:
                right, right_count = spec, counts[spec]
                basis = (f"the majority ({right_count} of {total})" if right_count * 2 > total
                         else f"{right_count} of {total}, as the spec says,")
            elif top_count * 2 > total:
                right, right_count = top, top_count
                basis = f"the majority ({top_count} of {total})"
            else:
                for method, feat in values:
                    others = sorted({str(f.value) for _, f in values} - {feat.value})
                    yield self.finding(
                        method, feat.line, method.column_of_line(feat.line),
                        f"alignment drift in '{feature}': {method.qualname} has {feat.value!r}, "
                        f"other implementations have {', '.join(repr(o) for o in others)}; "
                        f"no value has a majority",
                    )
                continue
            example, example_feature = next((m, f) for m, f in values if f.value == right)
            for method, feat in values:
                if feat.value != right:
                    yield self.finding(
                        method, feat.line, method.column_of_line(feat.line),
                        f"alignment drift in '{feature}': {method.qualname} has {feat.value!r}, "
                        f"{basis} has {right!r}, e.g. {example.qualname} at {example.path}:{example_feature.line}",
                    )
