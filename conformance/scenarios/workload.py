"""The work a scenario gives a cache: request tokens, random bytes per pool, storing, bounded driving.

Data is random bytes (any bit pattern, NaNs included), so only bytes compare;
driving is bounded and a prefetch that never finishes is reported under the
clause it broke (L1, L4, L5).
"""

from __future__ import annotations

import random
from typing import Any, Iterable, Mapping, Sequence

import torch

from conformance.oracles.lifecycle import background_errors
from spec.config import TerminationConfig
from spec.invariants import check
from spec.trace import Event, EventKind, TraceRecorder


def request_tokens(seed: int, count: int, *, vocab: int = 50_000) -> list[int]:
    """Token ids for one request; different seeds give different first pages."""
    rng = random.Random(seed)
    return [rng.randrange(vocab) for _ in range(count)]


def random_rows(rows: int, elem_shape: Sequence[int], dtype: torch.dtype, seed: int | torch.Generator) -> torch.Tensor:
    """rows x elem_shape of `dtype` holding random bytes: any bit pattern (NaNs included), so only bytes compare."""
    g = seed if isinstance(seed, torch.Generator) else torch.Generator().manual_seed(seed)
    raw = torch.randint(0, 256, (rows, *elem_shape, dtype.itemsize), dtype=torch.uint8, generator=g)
    return raw.view(dtype).reshape(rows, *elem_shape)


def pool_data(pools: Iterable[Any], tokens: int, seed: int | torch.Generator, *, states: bool = True) -> dict[str, torch.Tensor]:
    """random_rows for each pool (anything with name, unit, elem_shape, dtype): a row per token, one row per state pool.

    states=False leaves the state pools out. One generator serves every pool in order.
    """
    g = seed if isinstance(seed, torch.Generator) else torch.Generator().manual_seed(seed)
    return {
        pool.name: random_rows(1 if pool.unit == "state" else tokens, pool.elem_shape, pool.dtype, g)
        for pool in pools if states or pool.unit != "state"
    }


def request_data(cache, tokens: Sequence[int], seed: int) -> dict[str, torch.Tensor]:
    """Random bytes for every pool of `cache` (token pools: a row per token; state pools: one row)."""
    return pool_data(cache.pools.values(), len(tokens), seed)


def store(cache, tokens: Sequence[int], data: Mapping[str, torch.Tensor]) -> None:
    """Write a request, back it up to storage, and empty the device and host tiers."""
    __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
    cache.write(tokens, data)
    cache.flush()
    cache.evict_all()


def checked_progress(cache, request_ids: Sequence[str], trace: TraceRecorder | None = None) -> dict[str, int]:
    """One scheduler check. An exception from it after a background thread failed is that failure's (L5), said as such.

    With the trace, a rule the trace already shows broken is named first: it
    is what the implementation did before it failed (a load into the wrong
    slots that the storage refused, a commit its own tree refused), and the
    exception is its consequence.
    """
    __tracebackhide__ = True
    try:
        return cache.check_progress(request_ids)
    except AssertionError:
        raise
    except Exception as exc:
        failed = background_errors(cache)
        # Operations are still running: a slot they hold is not yet a leak, unless a thread died holding it.
        broken = check(trace.trace(), None, closed=bool(failed)) if trace is not None else []
        if broken:
            then = f"the implementation's background threads failed: {'; '.join(failed)}" if failed else f"{exc}"
            raise AssertionError(f"{broken[0]} (then a check of {list(request_ids)} raised {type(exc).__name__}: {then})") from exc
        if not failed:
            raise
        raise AssertionError(f"L5: a check of {list(request_ids)} raised {type(exc).__name__} after the implementation's background "
                             f"threads failed, so the prefetch cannot end as L1 and L2 say: " + "; ".join(failed)) from exc


def check_untracked(cache, request_ids: Sequence[str], why: str) -> dict[str, int]:
    """A scheduler check over ids this rank no longer tracks (`why`: aborted, never started): it must join their
    collectives neutrally (X4), so an exception there names X4, whatever the rest of the test checks."""
    __tracebackhide__ = True
    try:
        return cache.check_progress(list(request_ids))
    except Exception as exc:
        raise AssertionError(f"X4: a check over ids this rank no longer tracks ({', '.join(request_ids)}: {why}) raised "
                             f"{type(exc).__name__}: {exc}; it must join their collectives neutrally") from exc


def assert_whole_commit(done: dict[str, int], request_id: str, tokens: int, when: str) -> None:
    """Every page loaded: the check must end the prefetch (L1) and commit all of it (F11), never more (F3)."""
    __tracebackhide__ = True
    if request_id not in done:
        raise AssertionError(f"L1: {when}, {request_id} did not end (got {done})")
    committed = done[request_id]
    if committed > tokens:
        raise AssertionError(f"F3: {request_id} committed {committed} tokens, more than the {tokens} that loaded ({when})")
    if committed < tokens:
        raise AssertionError(f"F11: {request_id} committed {committed} of {tokens} tokens though every page loaded ({when}); L1 promises the whole hit")


def drive(cache, request_ids: Sequence[str], *, max_steps: int = 50, trace: TraceRecorder | None = None) -> dict[str, int]:
    """Scheduler steps over the same agreed id list until every id finished (bounded).

    With the trace, a prefetch that does not finish is reported under the
    rule it broke: L4 while one of its transfers never ended, L1 once all its
    IO had ended.
    """
    __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
    finished: dict[str, int] = {}
    pending = list(request_ids)
    for _ in range(max_steps):
        if not pending:
            return finished
        done = checked_progress(cache, pending, trace)
        finished.update(done)
        pending = [r for r in pending if r not in done]
    if not pending:
        return finished
    failed = background_errors(cache)
    if failed:
        # A thread that died took the operation with it: that is the rule broken (L5), not the wait that followed.
        raise AssertionError(f"L5: prefetches {pending} never finished: the implementation's background threads failed: " + "; ".join(failed))
    why = "\n".join(unfinished_because(trace.events(), op, max_steps) for op in pending) if trace is not None else ""
    raise AssertionError(f"prefetches {pending} did not finish within {max_steps} scheduler steps" + (f":\n{why}" if why else ""))


def unfinished_because(events: Sequence[Event], op: str, steps: int) -> str:
    """Why a prefetch still waits after `steps` checks, from the trace: which transfer never ended, or that all did."""
    ended = {e.io for e in events if e.kind is EventKind.IO_END and e.op == op}
    for e in events:
        if e.kind is EventKind.IO_START and e.op == op and e.io not in ended:
            return f"L4: {op}: IO {e.io} ({e.pool} {e.value}, #{e.seq}) started and never ended; the prefetch waits on it"
    done = next((e for e in events if e.kind is EventKind.IO_DONE and e.op == op), None)
    if done is None:
        return f"L4: {op}: its IO never ended (no io_done: the implementation neither finished nor failed it)"
    return f"L1: {op}: all its IO had ended (#{done.seq} io_done), yet {steps} checks did not terminate it"


def pass_deadline(cache, clock, config: TerminationConfig, pages: int, request_ids: Sequence[str], profile) -> None:
    """Move the clock past the prefetch's timeout, measured where the implementation's profile starts its timer.

    A profile whose timer starts at the first check that finds the prefetch
    unfinished (the ACK drain) gets that check first; it must finish nothing.
    """
    __tracebackhide__ = True  # a harness frame: pytest shows the implementation's frames, not this one
    from spec.profiles import TimerStart
    from spec.timeout import timeout_budget

    if profile.timer_start is TimerStart.FIRST_BLOCKED_CHECK:
        done = cache.check_progress(list(request_ids))
        assert not done, f"test setup: the check that starts the {profile.id} profile's timer finished {sorted(done)}"
    clock.advance(timeout_budget(config, pages) + 1.0)
