"""Host-tier taps: alloc/free of a host pool, and a state a commit attaches to a new host leaf."""

from __future__ import annotations

from typing import Any, Callable

from conformance.live.taps.state import KV, TREE, Taps, wrap
from spec.trace import HOST, EventKind


def tap_host_pool(taps: Taps, pool: Any, name: str = KV) -> None:
    """alloc/free of one host pool (`name`: the pool its slots belong to); owner: the operation in prefetch context, else the tree."""
    taps.pools.add(name)

    def alloc(original: Callable) -> Callable:
        def wrapper(need_size: int, *args: Any, **kwargs: Any) -> Any:
            slots = original(need_size, *args, **kwargs)
            if slots is not None:
                owner = taps.ctx.op if taps.ctx.phase == "prefetch" else None
                taps.trace.record(EventKind.ALLOC, op=owner, pool=name, space=HOST, slots=slots)
                for s in slots.tolist():
                    taps.owner[(name, s)] = owner or TREE
            return slots
        return wrapper

    def free(original: Callable) -> Callable:
        def wrapper(indices: Any, *args: Any, **kwargs: Any) -> Any:
            by_owner: dict[str, list[int]] = {}
            for s in indices.tolist():
                by_owner.setdefault(taps.owner.pop((name, s), TREE), []).append(s)
                taps.forget_slot(name, s)
            for owner, slots in by_owner.items():
                taps.trace.record(EventKind.FREE, op=None if owner == TREE else owner, pool=name, space=HOST, slots=slots)
            return original(indices, *args, **kwargs)
        return wrapper

    wrap(pool, "alloc", alloc)
    wrap(pool, "free", free)


def track_derived_pool(taps: Taps, name: str) -> None:
    """A pool whose host slots are the KV pool's own (indices_from_pool=KV): its IO is tracked, its slots are KV's."""
    taps.pools.add(name)


def tap_attach(taps: Taps, lru_list: Any, pool: str, value_attr: str) -> None:
    """A state attached to a new leaf by a commit: the leaf enters `lru_list` inside _insert_helper_host."""
    def attached(original: Callable) -> Callable:
        def wrapper(node: Any, *args: Any, **kwargs: Any) -> Any:
            op = taps.ctx.inserting
            value = getattr(node, value_attr, None)
            if op is not None and value is not None:
                taps.inserted(op, value.tolist(), pool=pool)
            return original(node, *args, **kwargs)
        return wrapper

    wrap(lru_list, "insert_mru", attached)
