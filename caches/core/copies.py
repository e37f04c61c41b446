"""Host<->device copies that may still be pending, and frees that must wait for them.

F9: a slot is freed only when no copy into or out of it is pending. Every copy
between tiers goes through here; every free of a device slot, and of a host
slot a copy may touch, asks here first and is deferred while a copy is pending.

Busy state is kept per allocation unit (a page of the "kv" group, one slot of
the "state" group): slots are always allocated in whole units, so a unit is
busy exactly when one of its slots is, and the bookkeeping stays small.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence, Union

import torch

from caches.core.copy_engine import CopyEngine, CopyError, CopyHandle
from caches.core.pools import PoolBuffer
from caches.errors import CacheArgumentError
from spec.trace import DEVICE, HOST, LOAD_BACK_COPY, WRITE_BACK_COPY, Event, EventKind, TraceRecorder

Slots = Union[torch.Tensor, Sequence[int]]
# (space, group, slot numbers) -> give them back to the right allocator.
FreeFn = Callable[[str, str, Slots], None]
DoneFn = Callable[[bool], None]


@dataclass
class CopyRecord:
    io: int
    pool: str
    group: str
    host_slots: torch.Tensor
    device_slots: torch.Tensor
    units: dict[str, list[int]]  # space -> allocation units this copy touches
    handle: CopyHandle
    on_done: DoneFn | None
    direction: str
    ok: bool | None = None  # None while pending


@dataclass
class _DeferredFree:
    space: str
    group: str
    slots: Slots
    units: list[int]
    pools: tuple[str, ...]


class CopyTracker:
    def __init__(
        self,
        engine: CopyEngine,
        trace: TraceRecorder,
        free_fn: FreeFn,
        wait_timeout_s: float,
        units: Mapping[str, int],
    ) -> None:
        self.engine = engine
        self.trace = trace
        self._free_fn = free_fn
        self._wait_timeout_s = wait_timeout_s
        self._unit = dict(units)  # group -> slots per allocation unit
        self._pending: list[CopyRecord] = []
        self._busy: dict[tuple[str, str, int], int] = {}
        self._deferred: list[_DeferredFree] = []

    def copy(
        self,
        *,
        pool: str,
        group: str,
        direction: str,
        dst: PoolBuffer,
        dst_slots: torch.Tensor,
        src: PoolBuffer,
        src_slots: torch.Tensor,
        on_done: DoneFn | None = None,
    ) -> CopyRecord:
        """Start a copy; the host side's IO_START is gated on the copy stream before it runs."""
        # The direction says which side is the host tier: on a CPU cache both buffers are CPU memory.
        if direction == LOAD_BACK_COPY:
            host_slots, device_slots = src_slots, dst_slots
        elif direction == WRITE_BACK_COPY:
            host_slots, device_slots = dst_slots, src_slots
        else:
            raise CacheArgumentError("direction", direction, f"{LOAD_BACK_COPY!r} or {WRITE_BACK_COPY!r}")
        io = self.trace.next_io_id()
        host_event = self.trace.record(EventKind.IO_START, pool=pool, space=HOST, slots=host_slots, io=io, value=direction)
        self.trace.record(EventKind.IO_START, pool=pool, space=DEVICE, slots=device_slots, io=io, value=direction)
        handle = self.engine.copy_slots(dst, dst_slots, src, src_slots, on_start=_gate(self.trace, host_event))
        units = {HOST: self._units(group, host_slots), DEVICE: self._units(group, device_slots)}
        record = CopyRecord(io, pool, group, host_slots, device_slots, units, handle, on_done, direction)
        for space, space_units in units.items():
            for unit in space_units:
                key = (space, group, unit)
                self._busy[key] = self._busy.get(key, 0) + 1
        self._pending.append(record)
        return record

    def busy(self, space: str, group: str, slots: Slots) -> bool:
        return any((space, group, u) in self._busy for u in self._units(group, slots))

    def poll(self) -> None:
        """Finish copies that completed (in issue order), then run frees no longer blocked."""
        still: list[CopyRecord] = []
        for record in self._pending:
            if record.handle.done():
                self._finish(record)
            else:
                still.append(record)
        self._pending = still
        self._run_deferred()

    def wait(self, records: Sequence[CopyRecord] | None = None) -> None:
        """Bounded wait for some (default: all) pending copies, then poll."""
        for record in list(self._pending if records is None else records):
            try:
                record.handle.wait(self._wait_timeout_s)
            except CopyError:
                pass  # reported as a failed IO by _finish
        self.poll()

    def free(self, space: str, group: str, slots: Slots, *, pools: Sequence[str] = ()) -> None:
        """Free now, or as soon as no pending copy touches any of these slots.

        pools: the pools whose data lives in these slot numbers (one FREE event each).
        """
        if len(slots) == 0:
            return
        units = self._units(group, slots)
        if any((space, group, u) in self._busy for u in units):
            self._deferred.append(_DeferredFree(space, group, slots, units, tuple(pools)))
        else:
            self._do_free(space, group, slots, tuple(pools))

    def deferred_slots(self) -> dict[tuple[str, str], int]:
        """Slots per (space, group) whose free waits on a pending copy: still allocated."""
        out: dict[tuple[str, str], int] = {}
        for item in self._deferred:
            out[(item.space, item.group)] = out.get((item.space, item.group), 0) + len(item.slots)
        return out

    def pending_count(self) -> int:
        return len(self._pending) + len(self._deferred)

    def _units(self, group: str, slots: Slots) -> list[int]:
        unit = self._unit[group]
        firsts = slots[::unit].tolist() if isinstance(slots, torch.Tensor) else list(slots[::unit])
        return [s // unit for s in firsts] if unit > 1 else firsts

    def _finish(self, record: CopyRecord) -> None:
        ok = True
        try:
            record.handle.wait(self._wait_timeout_s)
        except CopyError:
            ok = False
        record.ok = ok
        for space, slots in ((HOST, record.host_slots), (DEVICE, record.device_slots)):
            self.trace.record(EventKind.IO_END, pool=record.pool, space=space, slots=slots, io=record.io, value=ok)
        for space, space_units in record.units.items():
            for unit in space_units:
                key = (space, record.group, unit)
                left = self._busy[key] - 1
                if left:
                    self._busy[key] = left
                else:
                    del self._busy[key]
        if record.on_done is not None:
            record.on_done(ok)

    def _run_deferred(self) -> None:
        if not self._deferred:
            return
        waiting: list[_DeferredFree] = []
        for item in self._deferred:
            if any((item.space, item.group, u) in self._busy for u in item.units):
                waiting.append(item)
            else:
                self._do_free(item.space, item.group, item.slots, item.pools)
        self._deferred = waiting

    def _do_free(self, space: str, group: str, slots: Slots, pools: tuple[str, ...]) -> None:
        for pool in pools:
            self.trace.record(EventKind.FREE, pool=pool, space=space, slots=slots)
        self._free_fn(space, group, slots)


def _gate(trace: TraceRecorder, event: Event) -> Callable[[], None]:
    return lambda: trace.gate(event)
