"""The shim at run time: upstream's decision code, compiled against one cache of ours.

`BoundDecision(extracted, cache)` compiles the methods source.py extracted
with module globals `torch` and `time` that are this module's stand-ins, and
calls upstream's `can_terminate_prefetch(self, operation)` with views:

- `self` is a SelfView: the names of names.SELF_NAMES, upstream's own
  methods bound to it, and nothing else;
- `operation` is an OperationView of one snapshot taken under the operation's
  lock when the decision starts (PrefetchOperation.progress());
- `time.monotonic()` is the injected clock, read once per decision;
- `torch.distributed.all_reduce` on the `tp_group` handle goes to the cache's
  reducer; `get_world_size` on it is the reducer's world size.

The VOTE event (spec/trace.py) is recorded where upstream reduces: the first
MAX all-reduce of a decision carries [1 - vote, terminated], so the vote that
entered the collective is read from its payload. Where upstream runs no
reduce (one rank: `if self.tp_world_size > 1` in hi_mamba,
`_all_reduce_attn_groups` finding no group larger than one rank in hiradix and
unified; best_effort returns first), the local vote is observed from the
return value: without a reduce upstream returns `vote or terminated`, so with
the snapshot's terminated flag false the return is the vote itself; with it
true, upstream's code is evaluated once more on the same snapshot and the
same time with the flag cleared (no collective can run then: the shim refuses
one). That vote is recorded from inside upstream's return (the compile passes
each value the entry method returns through the shim, source.RETURNED), so the
event is recorded at upstream's own line. The recorded state's `timed_out` is
what upstream's own timeout helper returned (evaluated the same way when upstream's `completed or ...`
short-circuited it).
"""

from __future__ import annotations

import builtins
import types
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import torch

from caches.errors import CacheError
from caches.upstream_decision.names import ENTRY_METHOD, SELF_NAMES
from caches.upstream_decision.source import RETURNED, ExtractedDecision
from spec.decision import VOTE_COLLECTIVE
from spec.errors import bounded_repr
from spec.timeout import is_timed_out, timeout_budget

if TYPE_CHECKING:
    from caches.core.cache_base import HierarchicalCache
    from caches.core.operation import PrefetchOperation, Progress

UPSTREAM_MIN_COLLECTIVE = "upstream_min"


class ShimError(CacheError, RuntimeError):
    """Upstream's code did something at run time the shim does not map (names a class and what)."""


# --- what `self.<name>` is (the keys are names.SELF_NAMES, namespaces collapsed) -----------


@dataclass(frozen=True)
class TimeoutConfigView:
    """upstream's PrefetchTimeoutConfig: base, per_ki_token, max (seconds)."""

    base: float
    per_ki_token: float
    max: float


def _timeout_config(cache: HierarchicalCache, call: DecisionCall) -> TimeoutConfigView:
    t = cache.termination
    return TimeoutConfigView(t.timeout_base_s, t.timeout_per_ki_token_s, t.timeout_max_s)


SELF_VALUES: dict[str, Callable[[HierarchicalCache, "DecisionCall"], Any]] = {
    "prefetch_stop_policy": lambda cache, call: cache.prefetch_stop_policy,
    "page_size": lambda cache, call: cache.page_size,
    "prefetch_timeout_config": _timeout_config,
    "prefetch_timeout_base": lambda cache, call: cache.termination.timeout_base_s,
    "prefetch_timeout_per_page": lambda cache, call: cache.page_size / 1024 * cache.termination.timeout_per_ki_token_s,
    # The size of the group upstream's scheduler hands the cache as its tp group: with DP attention, its attention
    # TP group (one rank under DSA's context parallelism), not the world.
    "tp_world_size": lambda cache, call: call.tp_group().world_size,
    "tp_group": lambda cache, call: call.tp_group(),
    "attn_cp_group": lambda cache, call: call.handle("attn_cp"),
    "attn_tp_group": lambda cache, call: call.handle("attn_tp"),
}
assert set(SELF_VALUES) == {name.split(".")[0] for name in SELF_NAMES}, "names.SELF_NAMES and shim.SELF_VALUES disagree"


class _Strict:
    """Attribute reads outside the mapped names fail with one line naming the class and the name."""

    _what = "object"

    def __getattr__(self, name: str) -> Any:
        raise ShimError(f"{self._what} has no {bounded_repr(name)} in the upstream-decision shim (caches/upstream_decision/names.py)")


class SelfView(_Strict):
    def __init__(self, bound: BoundDecision, call: DecisionCall) -> None:
        self._what = f"{bound.extracted.class_name} (self)"
        for name, value in SELF_VALUES.items():
            setattr(self, name, value(bound.cache, call))
        for name, function in bound.functions.items():
            setattr(self, name, types.MethodType(bound.observed(name, function), self))
        for attribute, method in bound.extracted.aliases.items():
            setattr(self, attribute, getattr(self, method))
        for attribute, number in bound.extracted.constants:
            setattr(self, attribute, number)


class OperationView(_Strict):
    """The operation as upstream reads it, from one locked snapshot."""

    def __init__(self, operation: PrefetchOperation, progress: Progress, *, terminated: bool, class_name: str) -> None:
        self._what = f"{class_name} (operation)"
        self.hash_value = progress.hash_value
        self.completed_tokens = progress.completed_tokens
        self.pool_transfers = tuple(p.name for p in progress.pool_progress) if progress.pool_transfers_present else ()
        self.pool_transfers_done = progress.pool_transfers_done
        self.start_time = operation.start_time
        self._terminated = terminated

    def is_terminated(self) -> bool:
        return self._terminated


class GroupHandle:
    """What `self.tp_group` (or an attention group) is: collectives on it go to its reducer, by default
    the cache's own (all of its vote groups)."""

    def __init__(self, call: DecisionCall, reducer: Any = None, kind: str = "tp") -> None:
        self.call, self.reducer, self.kind = call, reducer, kind

    @property
    def world_size(self) -> int:
        return (self.reducer or self.call.bound.cache.reducer).world_size

    def __repr__(self) -> str:
        return f"self.{self.kind}_group"


# --- the module globals upstream's code sees -------------------------------------------


class ReduceOp:
    MAX = "max"
    MIN = "min"


class _Distributed(_Strict):
    _what = "torch.distributed"
    ReduceOp = ReduceOp

    def __init__(self, bound: BoundDecision) -> None:
        self._bound = bound

    def all_reduce(self, tensor: torch.Tensor, op: str = "sum", group: Any = None, async_op: bool = False) -> None:
        self._bound.current().all_reduce(tensor, op, group)

    def get_world_size(self, group: Any = None) -> int:
        return self._bound.current().group_of(group).world_size


class _Torch(_Strict):
    _what = "torch"
    int = torch.int
    int32 = torch.int32
    int64 = torch.int64

    def __init__(self, bound: BoundDecision) -> None:
        self.distributed = _Distributed(bound)

    @staticmethod
    def tensor(*args: Any, **kwargs: Any) -> torch.Tensor:
        return torch.tensor(*args, **kwargs)


class _Time(_Strict):
    _what = "time"

    def __init__(self, bound: BoundDecision) -> None:
        self._bound = bound

    def monotonic(self) -> float:
        return self._bound.current().now


# --- one decision ---------------------------------------------------------------------------


@dataclass
class DecisionCall:
    bound: BoundDecision
    operation: PrefetchOperation
    progress: Progress
    now: float
    probe: bool = False  # an evaluation only to observe a value: no collective may run
    timed_out: bool | None = None  # what upstream's timeout helper returned
    voted: bool = False
    group: GroupHandle = field(init=False)

    def __post_init__(self) -> None:
        self.group = GroupHandle(self)

    def handle(self, kind: str) -> GroupHandle | None:
        """The cache's group of `kind`, when the cache was given one (process_groups); else None, as upstream has."""
        reducer = self.bound.cache.kind_reducers.get(kind)
        return GroupHandle(self, reducer, kind) if reducer is not None else None

    def tp_group(self) -> GroupHandle:
        """What `self.tp_group` is: the cache's tp group when it was given one (process_groups), else its own group."""
        return self.handle("tp") or self.group

    def group_of(self, group: Any) -> GroupHandle:
        if not (isinstance(group, GroupHandle) and group.call is self):
            raise ShimError(f"{self.bound.extracted.class_name}: a collective on {bounded_repr(group)}; the shim maps "
                            f"self.tp_group, self.attn_cp_group and self.attn_tp_group")
        return group

    def all_reduce(self, tensor: torch.Tensor, op: str, group: Any) -> None:
        reducer = self.group_of(group).reducer or self.bound.cache.reducer
        if self.probe:
            raise ShimError(f"{self.bound.extracted.class_name}: a collective while re-evaluating the decision on a rank that ran none")
        cache = self.bound.cache
        values = [int(v) for v in tensor.reshape(-1).tolist()]
        request_id = self.operation.request_id
        if op == ReduceOp.MAX:
            if not self.voted:  # the payload is [1 - vote, terminated]: the vote entering the collective
                self.record_vote(values[0] == 0)
            reduced = reducer.all_reduce_max(values, name=VOTE_COLLECTIVE, op=request_id, step=cache._step)
        elif op == ReduceOp.MIN:
            reduced = reducer.all_reduce_min(values, name=UPSTREAM_MIN_COLLECTIVE, op=request_id, step=cache._step)
        else:
            raise ShimError(f"{self.bound.extracted.class_name}: all_reduce with op {bounded_repr(op)}; the shim maps MAX and MIN")
        tensor.copy_(torch.tensor(reduced, dtype=tensor.dtype).reshape(tensor.shape))

    def record_vote(self, vote: bool) -> None:
        self.voted = True
        self.bound.cache._record_vote(self.operation, self.progress, bool(vote), self.bound.timed_out_for_state(self))


class BoundDecision:
    """Upstream's decision compiled for one cache; call it with an operation."""

    def __init__(self, extracted: ExtractedDecision, cache: HierarchicalCache) -> None:
        self.extracted = extracted
        self.cache = cache
        self._calls: list[DecisionCall] = []
        namespace = {"__builtins__": builtins, "torch": _Torch(self), "time": _Time(self), RETURNED: self._returned}
        self.functions = extracted.compile(namespace)

    def _returned(self, value: Any) -> Any:
        """Where upstream's decision returns, its frame still running: a vote no collective recorded is recorded
        here, so the event says where upstream decided (conformance/report/sites.py)."""
        call = self.current()
        if not call.probe and not call.voted:
            call.record_vote(self._vote(call, value))
        return value

    def _vote(self, call: DecisionCall, returned: Any) -> bool:
        """The vote behind a return no collective saw: the return is `vote or terminated` (see the module docstring)."""
        return bool(returned) if not call.progress.terminated else bool(self._run(self._probe(call), terminated=False))

    def current(self) -> DecisionCall:
        if not self._calls:
            raise ShimError(f"{self.extracted.class_name}: upstream code ran outside a decision")
        return self._calls[-1]

    def observed(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        """A timeout helper reports what it returned to the running decision."""
        if name not in self.extracted.timeout_helpers:
            return function

        def helper(*args: Any, **kwargs: Any) -> Any:
            result = function(*args, **kwargs)
            call = self.current()
            if call.timed_out is None:
                call.timed_out = bool(result)
            return result

        return helper

    def _run(self, call: DecisionCall, terminated: bool, method: str = ENTRY_METHOD) -> Any:
        self._calls.append(call)
        try:
            view = OperationView(call.operation, call.progress, terminated=terminated, class_name=self.extracted.class_name)
            return self.functions[method](SelfView(self, call), view)
        finally:
            self._calls.pop()

    def __call__(self, operation: PrefetchOperation) -> bool:
        progress = operation.progress()  # one snapshot under the operation's lock
        call = DecisionCall(self, operation, progress, self.cache.clock.now())
        decision = bool(self._run(call, progress.terminated))
        if not call.voted:  # no return statement ran (the method fell off its end): no collective either
            call.record_vote(self._vote(call, decision))
        return decision

    def _probe(self, call: DecisionCall) -> DecisionCall:
        return DecisionCall(self, call.operation, call.progress, call.now, probe=True)

    def timed_out_for_state(self, call: DecisionCall) -> bool:
        """timed_out for the recorded state: upstream's own timeout helper on this snapshot and time."""
        if call.timed_out is not None:
            return call.timed_out
        helpers = sorted(self.extracted.timeout_helpers)
        if helpers:
            return bool(self._run(self._probe(call), call.progress.terminated, method=helpers[0]))
        budget = timeout_budget(self.cache.termination, len(call.progress.hash_value))
        return is_timed_out(call.operation.start_time, call.now, budget)
