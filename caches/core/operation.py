"""PrefetchOperation: one request's prefetch from storage into host slots.

All progress lives behind one lock. The IO thread starts and ends IO through
it, the scheduler votes on a snapshot taken under it and terminates through
it, so the spec's fence holds by construction:
- after terminate no IO starts (begin_io refuses) (F1);
- the progress a commit uses is read atomically with the terminate mark (F2);
- slots with IO in flight at terminate are freed by whoever ends that IO (F5);
- an IO still running past its bound (io_timeout_s) counts as failed: the
  scheduler expires it at a check (L4); its late result is never used, and
  its slots stay excluded until it really ends (F5).

Slot ownership: the operation owns its host slots until each one is inserted
into the tree or freed, exactly once (S3). Pools that share slot numbers (an
indexer reuses the KV pool's) return a slot number to the allocator only
when every sharing pool has let go of it.

Releasing and freeing are separate on purpose. Any thread may release slots
(the IO thread when IO on a terminated operation ends, the prefetch thread
when it trims a hit), but only the scheduler frees them, through `drain()`,
at points every rank reaches in the same step. Otherwise each rank's host
allocator would depend on its own thread timing, and eviction decisions
(hence the trees) would drift apart across ranks.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import torch

from caches.errors import CacheError
from spec.clock import Clock
from spec.fence import HitPolicy, PoolProgress
from spec.trace import LOAD, Event, EventKind, HOST, TraceRecorder


class FenceError(CacheError, RuntimeError):
    """A caller tried to expose a slot that the fence forbids exposing."""


# (allocator group, slot numbers) -> return them to that allocator.
FreeSlots = Callable[[str, list[int]], None]


@dataclass
class PoolPlan:
    """One pool's host slots for an operation.

    Token pools list their slots page by page, in request order; a state pool
    (TRAILING_PAGES) has one slot. `group` names the allocator the slot
    numbers come from (pools sharing KV slot numbers use "kv").
    """

    pool: str
    hit_policy: HitPolicy
    slots: torch.Tensor
    group: str
    per_page: bool = True
    completed_pages: int = 0

    def trailing_pages(self, page_size: int, hit_pages: int) -> int:
        """Pages a trailing pool needs at the end of a `hit_pages`-page hit: one state, or min(the window, the hit)."""
        if self.hit_policy is HitPolicy.TRAILING_PAGES:
            return 1
        return min(len(self.slots) // page_size, hit_pages)


@dataclass(frozen=True)
class InFlightIO:
    """One IO begun through an operation: gate `event` after releasing locks, end it with end_io.

    A refused one (`refused`: the re-check found the operation terminated, or an IO expired) is
    recorded, so a thread that goes on with it anyway shows in the trace (S2).
    """

    event: Event
    io: int
    pool: str
    slots: tuple[int, ...]
    started: float  # on the operation's clock
    refused: bool = False


@dataclass(frozen=True)
class Progress:
    """What the scheduler may act on: read under the operation's lock."""

    hash_value: tuple[str, ...]
    completed_tokens: int
    pool_transfers_present: bool
    pool_transfers_done: bool
    terminated: bool
    pool_progress: tuple[PoolProgress, ...] = ()
    in_flight_units: Mapping[str, tuple[tuple[int, ...], int]] = field(default_factory=dict)
    # The trace position when this snapshot was taken (IO events past it were not seen).
    trace_position: int | None = None

    @property
    def in_flight(self) -> dict[str, frozenset[int]]:
        """Slots with IO in flight, per pool."""
        return {pool: frozenset(_expand(units, width)) for pool, (units, width) in self.in_flight_units.items()}


class PrefetchOperation:
    """See the module docstring. Slots are tracked per allocation unit.

    Every plan's slots come in whole units (a page of a token pool, one slot of
    a state pool), and every call names whole units, so ownership, in-flight
    IO and sharing are kept per unit (its first slot number): a few hundred
    entries for a long prefix instead of one per token.
    """

    def __init__(
        self,
        request_id: str,
        *,
        requested_hashes: Sequence[str],
        kv: PoolPlan,
        extras: Sequence[PoolPlan],
        page_size: int,
        start_time: float,
        trace: TraceRecorder,
        free_slots: FreeSlots,
        last_node: object = None,
        clock: Clock | None = None,
    ) -> None:
        self.request_id = request_id
        self.requested_hashes = list(requested_hashes)
        self.page_size = page_size
        self.start_time = start_time
        self.last_node = last_node
        self.trace = trace
        self.clock: Clock = clock if clock is not None else trace.clock
        self.lock = trace.fence_lock()  # a lock that knows its owner under a test's recorder (spec/fence_lock.py)
        self.hash_value: list[str] = []  # hit pages; empty until the hit query ran
        self.completed_tokens = 0
        self.pool_transfers: list[PoolPlan] = list(extras)
        self.pool_transfers_done = not self.pool_transfers
        self.revoked: str | None = None
        self.io_done = threading.Event()  # set once the IO thread starts nothing more
        self._terminated = False
        self._kv = kv
        self._plans = {p.pool: p for p in [kv, *extras]}
        self._width = {p.pool: (page_size if p.per_page else 1) for p in self._plans.values()}
        self._group_width = {p.group: self._width[p.pool] for p in self._plans.values()}
        self._free_slots = free_slots
        self._released: list[tuple[str, list[int]]] = []  # (pool, units) released, not yet freed
        self._returnable: dict[str, list[int]] = {}  # group -> units no pool holds any more
        self._in_flight: dict[str, dict[int, int]] = {p: {} for p in self._plans}  # pool -> unit -> io
        self._open: dict[int, InFlightIO] = {}  # io -> what it is, while in flight
        self._expired: set[int] = set()  # io ids counted failed (L4); their results are never used
        self._owned: dict[str, set[int]] = {}
        # (group, unit) -> pools of that group still holding it
        self._holders: dict[tuple[str, int], set[str]] = {}
        for pool, plan in self._plans.items():
            units = self._units(pool, plan.slots)
            self._owned[pool] = set(units)
            for unit in units:
                self._holders.setdefault((plan.group, unit), set()).add(pool)

    # --- upstream-compatible surface ---------------------------------------

    @property
    def host_indices(self) -> torch.Tensor:
        return self._kv.slots

    def increment(self, tokens: int) -> bool:
        """Publish progress; refused once terminated."""
        with self.lock:
            self._fenced("publish")
            if self._terminated:
                return False
            self.completed_tokens += tokens
            return True

    def is_terminated(self) -> bool:
        with self.lock:
            return self._terminated

    def plan(self, pool: str) -> PoolPlan:
        return self._plans[pool]

    # --- what the scheduler reads -------------------------------------------

    def progress(self) -> Progress:
        with self.lock:
            return self._progress()

    def _progress(self) -> Progress:
        self._fenced("snapshot")
        return Progress(
            hash_value=tuple(self.hash_value),
            completed_tokens=self.completed_tokens,
            pool_transfers_present=bool(self.pool_transfers),
            pool_transfers_done=self.pool_transfers_done,
            terminated=self._terminated,
            pool_progress=tuple(PoolProgress(p.pool, p.hit_policy, p.completed_pages) for p in self.pool_transfers),
            in_flight_units={pool: (tuple(units), self._width[pool]) for pool, units in self._in_flight.items() if units},
            trace_position=self.trace.position(),
        )

    # --- the prefetch thread ------------------------------------------------

    def set_hit(self, pages: int) -> bool:
        """Trim the operation to its agreed hit; releases the slots of pages beyond it.

        Returns False (and changes nothing) when the operation is already terminated.
        """
        with self.lock:
            self._fenced("set_hit")
            if self._terminated:
                return False
            self.hash_value = self.requested_hashes[:pages]
            self.trace.record(EventKind.HIT, op=self.request_id, value=pages)
            for plan in self._plans.values():
                if plan.per_page:
                    self._release(plan.pool, self._units(plan.pool, plan.slots[pages * self.page_size :]))
            return True

    def trim_hit(self, pages: int) -> None:
        """After an IO failure: expect only the pages that arrived (so waiting can end)."""
        with self.lock:
            self._fenced("trim_hit")
            if self._terminated or pages >= len(self.hash_value):
                return
            self.hash_value = self.hash_value[:pages]
            self.trace.record(EventKind.HIT, op=self.request_id, value=pages)

    def revoke(self, reason: str) -> bool:
        """F7: a revoked operation is terminated and done; its idle slots are released."""
        with self.lock:
            self._fenced("revoke")
            if self._terminated:
                return False
            self._terminated = True
            self.revoked = reason
            self.pool_transfers_done = True
            self.trace.record(EventKind.REVOKE, op=self.request_id, value=reason)
            self._release_idle()
            return True

    # --- the IO thread ------------------------------------------------------

    def begin_io(self, pool: str, slots: Sequence[int], direction: str = LOAD, keys: Sequence[str] = ()) -> InFlightIO:
        """Start IO into these slots (whole units); refused when terminated (F1) or an IO expired (L4).

        Gate the returned event after releasing locks; a refused start moves no byte.
        """
        with self.lock:
            self._fenced("begin_io")
            io = self.trace.next_io_id()
            if self._terminated or self._expired:
                event = self.trace.record(EventKind.IO_REFUSED, op=self.request_id, pool=pool, space=HOST, slots=slots, io=io, value=direction, keys=keys)
                return InFlightIO(event, io, pool, tuple(int(s) for s in slots), self.clock.now(), refused=True)
            for unit in self._units(pool, slots):
                self._in_flight[pool][unit] = io
            event = self.trace.record(EventKind.IO_START, op=self.request_id, pool=pool, space=HOST, slots=slots, io=io, value=direction, keys=keys)
            started = InFlightIO(event, io, pool, tuple(int(s) for s in slots), self.clock.now())
            self._open[io] = started
            return started

    def end_io(self, start: InFlightIO, pool: str, ok_slots: Sequence[int], failed_slots: Sequence[int] = (), *, tokens: int = 0, pages: int | None = None) -> bool:
        """End an IO begun with begin_io. Publishes progress unless terminated or expired.

        tokens: KV progress to publish; pages: this pool's completed pages.
        Returns False when the operation was terminated meanwhile (the IO's
        slots are then released here, F5, since terminate excluded them) or
        when the IO had expired (L4: its result counts as failed).
        """
        ended = None
        with self.lock:
            self._fenced("end_io")
            io = start.io
            for part, ok in ((ok_slots, True), (failed_slots, False)):
                if len(part):
                    ended = self.trace.record(EventKind.IO_END, op=self.request_id, pool=pool, space=HOST, slots=part, io=io, value=ok)
            units = self._units(pool, ok_slots) + self._units(pool, failed_slots)
            for unit in units:
                self._in_flight[pool].pop(unit, None)
            self._open.pop(io, None)
            published = not self._terminated and io not in self._expired
            if self._terminated:
                self._release(pool, units)
            elif published:
                self.completed_tokens += tokens
                if pages is not None:
                    self._plans[pool].completed_pages = pages
        if ended is not None:
            self.trace.gate(ended)  # a hold point between this IO's end and the IO thread's next step (its next begin_io)
        return published

    def expire_io(self, now: float, bound_s: float) -> list[InFlightIO]:
        """L4: every IO in flight for more than `bound_s` at `now` counts as failed; returns those.

        Scheduler thread, at a check, before the vote. A failed KV batch trims
        the hit to the pages already loaded (nothing loaded: the operation is
        revoked); every extra pool counts as done, with the pages it had. The
        IO stays in flight (its slots excluded) until it really ends.
        """
        with self.lock:
            self._fenced("expire_io")
            expired = [io for io in self._open.values() if io.io not in self._expired and now - io.started > bound_s]
            if not expired:
                return []
            for io in expired:
                self._expired.add(io.io)
                self.trace.record(EventKind.IO_EXPIRED, op=self.request_id, pool=io.pool, space=HOST, slots=io.slots, io=io.io, value=bound_s)
            if self._terminated:
                return expired
            if any(io.pool == self._kv.pool for io in expired):
                loaded = min(self.completed_tokens // self.page_size, len(self.hash_value))
                if loaded == 0:
                    self._terminated = True
                    self.revoked = "io_timeout"
                    self.trace.record(EventKind.REVOKE, op=self.request_id, value=self.revoked)
                    self._release_idle()
                elif loaded < len(self.hash_value):
                    self.hash_value = self.hash_value[:loaded]
                    self.trace.record(EventKind.HIT, op=self.request_id, value=loaded)
            self.pool_transfers_done = True  # no extra pool starts after this: each counts with what it had
            return expired

    def fail_in_flight(self) -> None:
        """End every IO still marked in flight as failed (an IO thread hit an unexpected error).

        Without this, a slot of an IO that never ends would never be freed (F8).
        """
        with self.lock:
            self._fenced("fail_in_flight")
            for pool, in_flight in self._in_flight.items():
                if not in_flight:
                    continue
                by_io: dict[int, list[int]] = {}
                for unit, io in in_flight.items():
                    by_io.setdefault(io, []).append(unit)
                for io, units in by_io.items():
                    self.trace.record(EventKind.IO_END, op=self.request_id, pool=pool, space=HOST, slots=_expand(units, self._width[pool]), io=io, value=False)
                units = list(in_flight)
                in_flight.clear()
                for io in by_io:
                    self._open.pop(io, None)
                if self._terminated:
                    self._release(pool, units)

    def finish_transfers(self) -> None:
        """The IO thread starts nothing more for this operation."""
        with self.lock:
            self._fenced("finish_transfers")
            self.pool_transfers_done = True
            self.trace.record(EventKind.IO_DONE, op=self.request_id)
        self.io_done.set()

    # --- the scheduler: terminate, then commit ------------------------------

    def terminate(self, step: int | None) -> Progress:
        """F1 + F2: mark terminated and snapshot progress atomically.

        The event is gated after the lock is released: a harness holding the
        scheduler there lets IO move before the commit uses the snapshot.
        """
        with self.lock:
            self._fenced("terminate")
            self._terminated = True
            snapshot = self._progress()
            event = self.trace.record(EventKind.TERMINATE, op=self.request_id, step=step, value=snapshot.completed_tokens)
        self.trace.gate(event)
        return snapshot

    def mark_terminate(self) -> None:
        with self.lock:
            self._fenced("terminate")
            self._terminated = True

    def take_for_insert(self, pool: str, slots: Sequence[int]) -> None:
        """The slots (whole units) now belong to the tree (the caller records INSERT)."""
        with self.lock:
            self._fenced("take_for_insert")
            group = self._plans[pool].group
            units = self._units(pool, slots)
            busy = [u for u in units if u in self._in_flight[pool]]
            if busy:
                raise FenceError(f"S1: {self.request_id}: slot {busy[0]} of pool {pool} would enter the tree with IO in flight")
            self._owned[pool].difference_update(units)
            for unit in units:
                self._holders.pop((group, unit), None)

    def release(self, pool: str, slots: Sequence[int]) -> None:
        """Release slots (whole units) the operation owns that will not be inserted (e.g. duplicates)."""
        with self.lock:
            self._release(pool, self._units(pool, slots))

    def release_idle(self) -> None:
        """Release every slot still owned and not under IO; in-flight ones go when their IO ends."""
        with self.lock:
            self._release_idle()

    def has_in_flight(self) -> bool:
        with self.lock:
            return any(self._in_flight.values())

    def drain(self) -> int:
        """Free what was released (scheduler thread only, at agreed points); returns slot numbers freed."""
        with self.lock:
            self._fenced("drain")
            released, self._released = self._released, []
            returnable, self._returnable = self._returnable, {}
            if self.trace.enabled:
                for pool, units in released:
                    self.trace.record(EventKind.FREE, op=self.request_id, pool=pool, space=HOST, slots=_expand(units, self._width[pool]))
        freed = 0
        for group, units in returnable.items():
            slots = _expand(units, self._group_width[group])
            self._free_slots(group, slots)
            freed += len(slots)
        return freed

    def allocated_slots(self) -> dict[str, int]:
        """Slot numbers per allocator group not yet returned to the allocator (held, or released but not drained)."""
        with self.lock:
            units: dict[str, set[int]] = {}
            for group, unit in self._holders:
                units.setdefault(group, set()).add(unit)
            for group, returnable in self._returnable.items():
                units.setdefault(group, set()).update(returnable)
            return {group: len(found) * self._group_width[group] for group, found in units.items()}

    def owned_slots(self) -> dict[str, list[int]]:
        with self.lock:
            return {pool: _expand(sorted(units), self._width[pool]) for pool, units in self._owned.items() if units}

    # --- internals (lock held) ------------------------------------------------

    def _fenced(self, section: str) -> None:
        self.trace.check_fenced(section, self.lock, self.request_id)

    def _units(self, pool: str, slots: Sequence[int] | torch.Tensor) -> list[int]:
        width = self._width[pool]
        firsts = slots[::width]
        return firsts.tolist() if isinstance(firsts, torch.Tensor) else list(firsts)

    def _release_idle(self) -> None:
        for pool, owned in self._owned.items():
            in_flight = self._in_flight[pool]
            self._release(pool, [u for u in owned if u not in in_flight])

    def _release(self, pool: str, units: Sequence[int]) -> None:
        self._fenced("release")
        owned = self._owned[pool]
        mine = [u for u in units if u in owned]
        if not mine:
            return
        owned.difference_update(mine)
        self._released.append((pool, mine))
        group = self._plans[pool].group
        for unit in mine:
            holders = self._holders.get((group, unit))
            if holders is None:
                continue
            holders.discard(pool)
            if not holders:
                del self._holders[(group, unit)]
                self._returnable.setdefault(group, []).append(unit)


def _expand(units: Sequence[int], width: int) -> list[int]:
    if width == 1:
        return list(units)
    return [first + offset for first in units for offset in range(width)]
