"""Helpers for deterministic race scenarios: hold points, a fence oracle, bounded helpers.

Everything here reaches an implementation only through the adapter protocol
(conformance/adapter.py) and the trace it records. The oracles are the spec's
own functions applied to the recorded trace, never values the implementation
reports about itself.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import pytest

from conformance.bounds import WAIT_S
from conformance.implementations.capabilities import require  # noqa: F401 - re-exported for the race tests
from conformance.gates import GateTimeout, Predicate
from conformance.oracles.outcome import assert_loaded_bytes, assert_no_violations
from conformance.scenarios.workload import request_data, request_tokens, store
from conformance.oracles.outcome import trailing_pools
from spec.config import TerminationConfig
from spec.fence import HitPolicy, committable_at_terminate
from spec.trace import LOAD, Event, EventKind, TraceRecorder

PRIMARY_POOL = "kv"


class SchedulerPointRecorder(TraceRecorder):
    """A TraceRecorder that also gates VOTE events.

    Implementations gate IO starts; this makes the scheduler's vote a gate
    point too, so a test can hold the scheduler between its vote and its
    terminate (windows 2 and 5). The gate runs after the event was appended,
    outside the recorder's lock.
    """

    SCHEDULER_POINTS = frozenset({EventKind.VOTE})

    def record(self, kind: EventKind, **fields: Any) -> Event:
        event = super().record(kind, **fields)
        if event.kind in self.SCHEDULER_POINTS:
            self.gate(event)
        return event


# --- predicates ----------------------------------------------------------------

def io_start(pool: str, direction: str = LOAD, *, op: str | None = None, nth: int = 1, trace: TraceRecorder | None = None) -> Predicate:
    """The nth IO_START of `pool` in `direction` (of operation `op` if given).

    nth > 1 needs the recorder: the count is read from the trace up to the
    event, so the predicate has no state of its own.
    """
    if nth > 1 and trace is None:
        raise ValueError("io_start(nth > 1) needs the trace recorder to count earlier starts")

    def matches(e: Event) -> bool:
        return e.kind is EventKind.IO_START and e.pool == pool and e.value == direction and (op is None or e.op == op)

    def predicate(e: Event) -> bool:
        if not matches(e):
            return False
        if nth == 1:
            return True  # the gate's hold takes the first thread that matches
        return sum(1 for x in trace.events() if x.seq <= e.seq and matches(x)) == nth

    return predicate


def vote_of(op: str) -> Predicate:
    return lambda e: e.kind is EventKind.VOTE and e.op == op


# --- the scheduler on a thread of its own -----------------------------------------

class Background:
    """Runs one call on a helper thread; result() waits, bounded, and re-raises."""

    def __init__(self, description: str, fn: Callable[..., Any], *args: Any, timeout_s: float = WAIT_S) -> None:
        self.description = description
        self.timeout_s = timeout_s
        self._result: list[Any] = []
        self._error: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, args=(fn, args), name=f"conformance {description}", daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[..., Any], args: tuple) -> None:
        try:
            self._result.append(fn(*args))
        except BaseException as exc:  # re-raised in the test thread
            self._error.append(exc)

    @contextmanager
    def parked_at(self, gate: Any) -> Iterator[None]:
        """The body runs while this call may be parked at `gate`: on a failure every parked thread goes, and the call ends, before it is re-raised."""
        try:
            yield
        except BaseException:
            gate.release_all()
            try:
                self.result()
            except Exception:
                pass  # the first failure is the one to report
            raise

    def result(self) -> Any:
        __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
        self._thread.join(self.timeout_s)
        if self._thread.is_alive():
            raise GateTimeout(f"{self.description} did not return within {self.timeout_s}s")
        if self._error:
            raise self._error[0]
        return self._result[0]


# --- data and storage ------------------------------------------------------------

def stored_request(cache, *, seed: int, pages: int, page_size: int) -> tuple[list[int], dict]:
    """A request of `pages` full pages, written, backed up to storage, evicted from every tier."""
    __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
    tokens = request_tokens(seed, pages * page_size)
    data = request_data(cache, tokens, seed)
    store(cache, tokens, data)
    return tokens, data


def page_write_keys(trace: TraceRecorder, pool: str) -> list[str]:
    """The page keys the trace's page writes name for a pool, in the order written."""
    return [k for e in trace.events() if e.kind is EventKind.PAGE_WRITE and e.pool == pool for k in e.keys]


def page_loaded_ok(trace: TraceRecorder, op: str, pool: str, key: str) -> bool:
    """Whether a load of op reported the page `key` of `pool` arrived: an ok IO_END of the load that read it holds its slots.

    A load's IO_START names its page keys in slot order, each key the same
    number of slots; its IO_END names the slots that arrived.
    """
    events = trace.events()
    for start in events:
        if start.kind is not EventKind.IO_START or start.op != op or start.pool != pool or start.value != LOAD or key not in start.keys:
            continue
        width = len(start.slots) // len(start.keys)
        index = start.keys.index(key)
        mine = set(start.slots[index * width:(index + 1) * width])
        if any(e.kind is EventKind.IO_END and e.io == start.io and e.pool == pool and e.value and mine <= set(e.slots) for e in events):
            return True
    return False


def pool_files(storage_dir: Path, pool: str, trace: TraceRecorder | None = None) -> set[Path]:
    """Stored pages of an extra pool: files whose name ends with '.<pool>', or with a key the trace's page writes name for it."""
    keys = page_write_keys(trace, pool) if trace is not None else []
    return {p for p in Path(storage_dir).rglob("*") if p.is_file() and p.name.endswith((f".{pool}", *keys))}


def key_files(storage_dir: Path, keys: Iterable[str]) -> set[Path]:
    """Stored files named by these page keys (their names end with one); empty where a layout names files otherwise."""
    keys = tuple(keys)
    return {p for p in Path(storage_dir).rglob("*") if p.is_file() and p.name.endswith(keys)} if keys else set()


def remove_files(paths: Iterable[Path]) -> int:
    count = 0
    for path in paths:
        path.unlink()
        count += 1
    return count


def served(cache, tokens: Sequence[int], data: Mapping[str, Any], committed: int) -> None:
    """F8 and S5: the tree serves the committed prefix, and nothing more, with the stored bytes.

    With a state or window pool a prefix is usable only up to a node carrying
    its state or whole window, so the tree may serve less than was committed
    (attached only for exactly its length, F4, F10); without one it serves
    exactly the commit.
    """
    __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
    device, host = cache.match(tokens)
    exact = not trailing_pools(cache)
    if exact:
        assert device + host == committed, f"F8: after committing {committed} tokens the tree serves {device} device + {host} host tokens"
    else:
        assert device + host <= committed, f"F8: after committing {committed} tokens the tree serves {device + host}"
    loaded = cache.load_back(tokens)
    assert loaded.tokens == device + host, f"load-back served {loaded.tokens} tokens of a {device + host}-token match"
    assert_loaded_bytes(cache, loaded, data, len(tokens))


# --- capabilities -------------------------------------------------------------------

def require_pool(cache, impl, pool: str) -> None:
    if pool not in cache.pools:
        pytest.skip(f"{impl.name} runs without the {pool} pool by default")


def all_pages_extra_pools(cache) -> list[str]:
    return [name for name, p in cache.pools.items() if name != PRIMARY_POOL and p.unit == "token" and p.hit_policy is HitPolicy.ALL_PAGES]


# --- oracles over the trace -----------------------------------------------------------

def op_events(trace: TraceRecorder, op: str, kind: EventKind) -> list[Event]:
    return [e for e in trace.events() if e.op == op and e.kind is kind]


def starts_after_terminate(trace, op: str = "r1") -> list[Event]:
    """The loads of `op` that started after its first terminate (none before one)."""
    terminates = op_events(trace, op, EventKind.TERMINATE)
    if not terminates:
        return []
    return [e for e in op_events(trace, op, EventKind.IO_START) if e.value == LOAD and e.seq > terminates[0].seq]


def fence_tokens(events: Sequence[Event], op: str, pools: Mapping[str, Any], page_size: int) -> int:
    """What the spec's fence lets one rank commit for `op`, from the trace alone (spec.fence.committable_at_terminate)."""
    pages = committable_at_terminate(events, op, {name: pool.hit_policy for name, pool in pools.items()}, page_size)
    if pages is None:
        raise AssertionError(f"{op} was never terminated or revoked")
    return pages * page_size


def assert_commit_within_fence(trace: TraceRecorder, cache, op: str, committed: int, page_size: int, config: TerminationConfig | None = None) -> int:
    """The trace so far breaks no invariant, and `committed` is exactly what the fence allows (no more: F3; no less: F11)."""
    __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
    assert_no_violations(trace.trace(), config, closed=False)
    want = fence_tokens(trace.events(), op, cache.pools, page_size)
    allowed = "pages whose KV and every ALL_PAGES pool had finished loading when it was terminated"
    assert committed <= want, f"F3: committed {committed} tokens of {op}; the fence allows at most {want} ({allowed})"
    assert committed == want, f"F11: committed {committed} tokens of {op}; the fence allows {want} ({allowed}): loaded pages were dropped"
    return want


def host_allocated(cache) -> int:
    """Host slots still allocated, summed over slot groups (keys start with the tier)."""
    return sum(allocated for name, (allocated, _, _) in cache.slot_accounting().items() if name.split(":")[0] == "host")


def close_and_check_trace(cache, trace: TraceRecorder, config: TerminationConfig | None, *, host_slots_left: int | None = None, clauses: Iterable[str] | None = None) -> None:
    """Stop the cache (every held IO must have been released), then check the whole trace.

    host_slots_left: host slots that must still be allocated after close
    (what the tree holds); None skips that check. clauses: the checkers to
    run (default all).
    """
    __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
    cache.close()
    assert_no_violations(trace.trace(), config, clauses=clauses)
    if host_slots_left is not None:
        left = host_allocated(cache)
        assert left == host_slots_left, f"F8: {left} host slots still allocated after close; expected {host_slots_left} (slots leaked)"

