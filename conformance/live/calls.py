"""How a tree's cache takes each call the sessions make, read from the tree's own signatures at run time.

Upstream's cache API changed shape across its history: token lists became
RadixKey (2025-09), then match_prefix, insert, evict and init_load_back each
took one params object (MatchPrefixParams, InsertParams, EvictParams,
InitLoadBackParams; 2026-01 to 2026-03). A session calls through here, and
each call takes the form the method's own first parameter asks for: `params`
gets the params object of the tree's base_prefix_cache, anything else the
arguments the older scheduler passed.
"""

from __future__ import annotations

import inspect
from typing import Any, Sequence

from conformance.live.runtime import Runtime


def takes_params(method: Any) -> bool:
    """Whether an upstream method takes one params object (its first parameter is named `params`)."""
    names = [p for p in inspect.signature(method).parameters if p != "self"]
    return bool(names) and names[0] == "params"


def radix_key(runtime: Runtime, tokens: Sequence[int]) -> Any:
    """The tree's key for a token sequence: a RadixKey where the tree has one, else the token list older trees take."""
    cls = getattr(runtime.module("radix_cache"), "RadixKey", None)
    return cls(list(tokens)) if cls is not None else list(tokens)


def _params(runtime: Runtime, name: str, **fields: Any) -> Any:
    return getattr(runtime.module("base_prefix_cache"), name)(**fields)


def match(runtime: Runtime, cache: Any, key: Any) -> Any:
    """match_prefix of a key the session built (LiveSession.radix_key: the form the tree's scheduler passes)."""
    if takes_params(cache.match_prefix):
        return cache.match_prefix(_params(runtime, "MatchPrefixParams", key=key))
    return cache.match_prefix(key=key)


def insert(runtime: Runtime, cache: Any, key: Any, slots: Any) -> int:
    """Insert a key's slots (the key as the session built it); the length of the prefix the tree already held (its
    slots the caller frees)."""
    if takes_params(cache.insert):
        result = cache.insert(_params(runtime, "InsertParams", key=key, value=slots))
    else:
        result = cache.insert(key, slots)
    return int(getattr(result, "prefix_len", result))


def evict(runtime: Runtime, cache: Any, num_tokens: int, **fields: Any) -> None:
    """Evict from the device tier; `fields` (a sidecar's own counts) go where the tree's EvictParams takes them."""
    if takes_params(cache.evict):
        cache.evict(_params(runtime, "EvictParams", num_tokens=num_tokens, **fields))
    else:
        cache.evict(num_tokens)


def best_match_node(match_result: Any) -> Any:
    """The deepest node a match reached: best_match_node, or (older trees) last_host_node, the deepest node not
    walked past an eviction (every evicted node is backed up)."""
    node = getattr(match_result, "best_match_node", None)
    return node if node is not None else match_result.last_host_node


def init_load_back(runtime: Runtime, cache: Any, match_result: Any) -> Any:
    """Start loading a match's host part back; the device slots it takes (empty when it loads nothing)."""
    node, host_hit = best_match_node(match_result), int(match_result.host_hit_length)
    if takes_params(cache.init_load_back):
        # The params object named the node last_host_node until it became best_match_node (2026-05).
        fields = inspect.signature(runtime.module("base_prefix_cache").InitLoadBackParams).parameters
        name = "best_match_node" if "best_match_node" in fields else "last_host_node"
        loaded, _ = cache.init_load_back(_params(runtime, "InitLoadBackParams", **{name: node}, host_hit_length=host_hit))
    else:
        loaded, _ = cache.init_load_back(node, host_hit)
    return loaded


def release_aborted(cache: Any, request_id: str) -> bool:
    """What the tree's scheduler tells the cache of an aborted request: release_aborted_request where the cache has it;
    an older tree's scheduler drops the request and tells the cache nothing (False)."""
    release = getattr(cache, "release_aborted_request", None)
    if release is None:
        return False
    release(request_id)
    return True


def pop_loaded_tokens(cache: Any, request_id: Any) -> None:
    """What the scheduler does once a prefetch is done: pop its loaded-token count (pop_prefetch_loaded_tokens; older
    trees keep the count in prefetch_loaded_tokens_by_reqid, which their scheduler pops)."""
    pop = getattr(cache, "pop_prefetch_loaded_tokens", None)
    if pop is not None:
        pop(request_id)
        return
    counts = getattr(cache, "prefetch_loaded_tokens_by_reqid", None)
    if counts is not None:
        counts.pop(request_id, None)


# The terminated flag of a PrefetchOperation: is_terminated/mark_terminate/_terminated_flag since 2025-09-08, before it
# is_done/mark_done/_done_flag (the same flag: increment refuses once it is set).
TERMINATED = (("is_terminated", "mark_terminate", "_terminated_flag"), ("is_done", "mark_done", "_done_flag"))


def _terminated_names(operation: Any) -> tuple[str, str, str]:
    return next((names for names in TERMINATED if hasattr(operation, names[0])), TERMINATED[0])


def is_terminated(operation: Any) -> bool:
    return bool(getattr(operation, _terminated_names(operation)[0])())


def mark_terminated(operation: Any) -> None:
    getattr(operation, _terminated_names(operation)[1])()


def terminated_flag(operation: Any) -> str | None:
    """The attribute holding the operation's terminated flag (None where it has neither)."""
    flag = _terminated_names(operation)[2]
    return flag if hasattr(operation, flag) else None


def data_page(host_pool: Any, slot: int) -> Any:
    """One host page's data as the backend stores it: get_data_page(flat=True), or get_flat_data_page before 2025-09."""
    get = getattr(host_pool, "get_data_page", None)
    return get(slot, flat=True) if get is not None else host_pool.get_flat_data_page(slot)


STOPPED_THREADS = ("prefetch_thread", "backup_thread")  # the storage threads a controller's reset joins
WAKE_QUEUES = ("prefetch_queue", "backup_queue")  # their queues, whose loops take None as a wake-up


def shutdown(cache: Any, join_s: float) -> None:
    """Upstream's own detach (the cache's shutdown); a cache without one (before 2026-03) stops its controller's
    storage threads as its reset does: the stop event set, each woken with the None its loop skips, then joined."""
    stop = getattr(cache, "shutdown", None)
    if stop is not None:
        stop()
        return
    cc = cache.cache_controller
    cc.stop_event.set()
    if not getattr(cc, "enable_storage", False):
        return
    for name in WAKE_QUEUES:
        cc_queue = getattr(cc, name, None)
        if cc_queue is not None:
            cc_queue.put_nowait(None)
    for name in STOPPED_THREADS:
        thread = getattr(cc, name, None)
        if thread is not None:
            thread.join(join_s)
