"""Decision probes: a real upstream operation placed in a spec state, and the state a vote saw.

The decision tests hand the class's own can_terminate_prefetch an operation
made here (never registered as ongoing); the taps record every vote with
the state decision_state reads off the operation it was cast on.
"""

from __future__ import annotations

from typing import Any

from conformance.adapter import CacheEnv
from conformance.live import calls
from conformance.live.runtime import Runtime
from spec.decision import DecisionState
from spec.errors import ConfigError
from spec.timeout import is_timed_out, timeout_budget

PROBE_ID = "decision-probe"  # the request of every decision probe


def decision_state(env: CacheEnv, operation: Any, fixed_budget_s: float | None = None) -> DecisionState | None:
    """The spec state of an upstream operation now ("timed out": its start time on the harness's clock, against the
    configured budget, or the class's own where it fixes one: the timed-out verdict its vote saw)."""
    t = env.termination
    hit = len(operation.hash_value)
    budget = timeout_budget(t, hit) if fixed_budget_s is None else fixed_budget_s
    try:
        return DecisionState(
            policy=t.policy, page_size=t.page_size, hit_pages=hit, completed_tokens=int(operation.completed_tokens),
            timed_out=is_timed_out(float(operation.start_time), env.clock.now(), budget),
            pool_transfers_present=bool(getattr(operation, "pool_transfers", None)),
            pool_transfers_done=bool(getattr(operation, "pool_transfers_done", True)),
            terminated=calls.is_terminated(operation),
        )
    except ConfigError:
        return None  # a state outside the spec's space (recorded as a vote without a state)


def _fork_operation_class(runtime: Runtime, transfers_present: bool, sidecar_transfer: Any) -> tuple[type, list | None]:
    """The operation class a probe is made of, and the pool transfers it carries when present.

    With a sidecar, its transfer on the hybrid controller's operation; without
    one, where the tree has the hybrid controller, an indexer transfer (the
    sidecar of HiRadixCache's own DSA build).
    """
    m = runtime.modules
    hybrid = m.get("hybrid_cache_controller")
    if not transfers_present:
        return (hybrid.PrefetchOperation if sidecar_transfer is not None else m["cache_controller"].PrefetchOperation), None
    if sidecar_transfer is not None:
        return hybrid.PrefetchOperation, [sidecar_transfer]
    if hybrid is None:
        return m["cache_controller"].PrefetchOperation, None
    storage = m["hicache_storage"]
    return hybrid.PrefetchOperation, [storage.PoolTransfer(name=storage.PoolName.INDEXER, hit_policy=storage.PoolHitPolicy.ALL_PAGES,
                                                           indices_from_pool=storage.PoolName.KV)]


def fork_operation(runtime: Runtime, kv_host: Any, state: DecisionState, start_time: float, sidecar_transfer: Any = None) -> Any:
    """A PrefetchOperation of the fork's controllers in `state`, started at `start_time`."""
    operation_cls, pool_transfers = _fork_operation_class(runtime, state.pool_transfers_present, sidecar_transfer)
    kwargs = {"pool_transfers": pool_transfers} if pool_transfers is not None else {}
    operation = operation_cls(PROBE_ID, kv_host.get_dummy_flat_data_page()[:0], [0] * (state.hit_pages * state.page_size), **kwargs)
    if state.pool_transfers_present and pool_transfers is None:
        operation.pool_transfers = ["indexer"]  # upstream reads both fields with getattr
    if state.pool_transfers_present:
        operation.pool_transfers_done = state.pool_transfers_done
    operation.hash_value = [f"probe-{i}" for i in range(state.hit_pages)]
    operation.completed_tokens = state.completed_tokens
    operation.start_time = start_time
    if state.terminated:
        calls.mark_terminated(operation)
    return operation
