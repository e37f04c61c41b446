"""Slot copies between pool buffers on different tiers (host <-> device).

On CUDA every copy is queued on one dedicated copy stream without blocking the
caller, and completion is tracked by an event recorded after it. On CPU the
same calls run plain indexing copies: at once (an already complete handle),
or, with ``cpu_stream=True``, in order on one worker thread that plays the
part of the copy stream, so the CPU path has the same asynchronous semantics
(a copy can still be pending when the caller moves on, and can be held).
The path is chosen from ``device.type``; no device name is assumed.
"""

from __future__ import annotations

import itertools
import math
import queue
import threading
import time
from typing import Callable, Sequence

import torch

from caches.core.pools import DeviceLike, PoolBuffer, check_slots
from caches.errors import CacheError, CacheTimeoutError
from spec.errors import bounded_repr

__all__ = ["CopyEngine", "CopyHandle", "CopyTimeout", "CopyEngineError", "CopyError", "DEFAULT_COPY_TIMEOUT_S"]

DEFAULT_COPY_TIMEOUT_S = 30.0
# Poll back-off while waiting on an event: short first (copies are usually
# fast), capped so a long wait does not burn a core.
_POLL_FIRST_S = 50e-6
_POLL_MAX_S = 2e-3

SUPPORTED_DEVICE_TYPES = ("cpu", "cuda")
# Below this many slots per contiguous run a gather is as fast as slice copies.
_RUN_COPY_MIN_SLOTS = 8


class CopyEngineError(CacheError, ValueError):
    """A copy request or the engine's configuration is invalid."""


class CopyTimeout(CacheTimeoutError):
    """A bounded wait on a copy ran out before the copy completed."""


class CopyError(CacheError, RuntimeError):
    """A queued copy failed on the copy stream; raised by the handle's wait()."""


class _CopyLabel:
    """A copy's name, formatted on first use (error messages, repr)."""

    __slots__ = ("parts",)

    def __init__(self, *parts: object) -> None:
        self.parts = parts

    def __str__(self) -> str:
        pool, src, dst, count, number = self.parts
        return f"{pool} {src}->{dst} ({count} slots) #{number}"


class CopyHandle:
    """Completion of one queued copy.

    ``is_complete`` is polled by :meth:`done`; ``None`` means the copy already
    completed when the handle was made. ``keepalive`` holds tensors the copy
    reads or writes until it is seen complete.
    """

    def __init__(
        self,
        label: "str | _CopyLabel",
        is_complete: Callable[[], bool] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        event: "torch.cuda.Event | None" = None,
        device: torch.device | None = None,
        keepalive: Sequence[object] = (),
        waiter: "Callable[[float], bool] | None" = None,
        error: "Callable[[], BaseException | None] | None" = None,
    ) -> None:
        self._label = label
        self._waiter = waiter
        self._error = error
        self.event = event
        self.device = device  # where the event was recorded (None: no event)
        self._is_complete = is_complete
        self._clock = clock
        self._keepalive = list(keepalive)
        self._complete = is_complete is None
        self._lock = threading.Lock()

    @property
    def label(self) -> str:
        return str(self._label)

    def done(self) -> bool:
        if self._complete:
            return True
        with self._lock:
            if not self._complete and self._is_complete is not None and self._is_complete():
                self._complete = True
                self._keepalive.clear()
        return self._complete

    def wait(self, timeout_s: float = DEFAULT_COPY_TIMEOUT_S) -> None:
        """Return once the copy completed; raise :class:`CopyTimeout` after ``timeout_s``."""
        if (
            isinstance(timeout_s, bool)
            or not isinstance(timeout_s, (int, float))
            or not math.isfinite(timeout_s)
            or timeout_s <= 0
        ):
            raise CopyEngineError(
                f"timeout_s={bounded_repr(timeout_s)} for copy '{self.label}' is invalid: "
                f"expected a positive finite number of seconds"
            )
        if self._waiter is not None:
            if not self._waiter(timeout_s):
                raise CopyTimeout(f"copy '{self.label}' did not complete within {timeout_s} s")
            self._raise_if_failed()
            return
        if self.done():
            return
        deadline = self._clock() + timeout_s
        pause = _POLL_FIRST_S
        while not self.done():
            if self._clock() >= deadline:
                raise CopyTimeout(
                    f"copy '{self.label}' did not complete within {timeout_s} s"
                )
            # A short pause between polls (an event cannot be waited on with a
            # deadline); it orders nothing, the deadline bounds the loop.
            time.sleep(pause)
            pause = min(pause * 2, _POLL_MAX_S)

    def _raise_if_failed(self) -> None:
        error = self._error() if self._error is not None else None
        if error is not None:
            raise CopyError(f"copy '{self.label}' failed: {type(error).__name__}: {error}") from error

    def make_stream_wait(self, stream: "torch.cuda.Stream | None" = None) -> None:
        """Make ``stream`` (default: the current one) wait for this copy on the GPU.

        Use before consuming device data that the copy writes, without blocking
        the host. No-op for a copy that has no event (CPU).
        """
        if self.event is None:
            return
        target = stream if stream is not None else torch.cuda.current_stream(self.device)
        target.wait_event(self.event)

    def __repr__(self) -> str:
        return f"CopyHandle({self.label!r}, done={self._complete})"


def _contiguous_runs(src: torch.Tensor, dst: torch.Tensor) -> list[tuple[int, int, int]]:
    """Split paired slot lists into runs contiguous on both sides: (src0, dst0, length)."""
    breaks = ((src[1:] - src[:-1]) != 1) | ((dst[1:] - dst[:-1]) != 1)
    starts = [0] + (torch.nonzero(breaks).flatten() + 1).tolist()
    ends = starts[1:] + [src.numel()]
    src_list, dst_list = src.tolist(), dst.tolist()
    return [(src_list[a], dst_list[a], b - a) for a, b in zip(starts, ends)]


class CopyEngine:
    """Copies slots between :class:`PoolBuffer` objects of the same pool."""

    def __init__(
        self,
        device: DeviceLike,
        *,
        clock: Callable[[], float] = time.monotonic,
        cpu_stream: bool = False,
    ) -> None:
        try:
            where = torch.device(device)
        except (RuntimeError, TypeError) as exc:
            raise CopyEngineError(f"device={bounded_repr(device)} is invalid: {exc}") from None
        if where.type not in SUPPORTED_DEVICE_TYPES:
            raise CopyEngineError(
                f"device={str(where)!r} is not supported by CopyEngine: accepted "
                f"device types are {', '.join(SUPPORTED_DEVICE_TYPES)}"
            )
        self._clock = clock
        self._sequence = itertools.count(1)
        self.stream: "torch.cuda.Stream | None" = None
        if where.type == "cuda":
            if not torch.cuda.is_available():
                raise CopyEngineError(
                    f"device={str(where)!r} is unavailable: torch sees no CUDA device"
                )
            if where.index is None:
                where = torch.device(where.type, torch.cuda.current_device())
            self.stream = torch.cuda.Stream(device=where)
        self.device = where
        self._cpu_stream = _CpuCopyStream(f"copy stream ({where})") if cpu_stream and where.type == "cpu" else None

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop the CPU copy stream's worker after the copies already queued."""
        if self._cpu_stream is not None:
            self._cpu_stream.close(timeout_s)

    @property
    def threads(self) -> list[threading.Thread]:
        return [self._cpu_stream.thread] if self._cpu_stream is not None else []

    def __repr__(self) -> str:
        return f"CopyEngine(device='{self.device}')"

    def _check_buffer(self, buffer: object, role: str) -> PoolBuffer:
        if not isinstance(buffer, PoolBuffer):
            raise CopyEngineError(f"{role}={bounded_repr(buffer)} is invalid: expected a PoolBuffer")
        where = buffer.torch_device
        if where.type != "cpu" and where != self.device:
            raise CopyEngineError(
                f"{role} pool '{buffer.name}' lives on '{where}', but this engine copies "
                f"for '{self.device}': accepted are 'cpu' buffers and '{self.device}' buffers"
            )
        return buffer

    def copy_slots(
        self,
        dst: PoolBuffer,
        dst_slots: torch.Tensor,
        src: PoolBuffer,
        src_slots: torch.Tensor,
        *,
        label: str | None = None,
        on_start: Callable[[], None] | None = None,
    ) -> CopyHandle:
        """Copy ``src[src_slots[i]]`` to ``dst[dst_slots[i]]`` for every i.

        ``on_start`` runs just before the copy: on the CPU copy stream's worker
        (where it may hold the copy, e.g. a test gate), otherwise in the caller.

        On CUDA the copy is ordered after work already queued on the caller's
        current stream; a consumer on the device calls
        ``handle.make_stream_wait()`` (GPU-side) or ``handle.wait()`` (host-side).
        """
        self._check_buffer(dst, "dst")
        self._check_buffer(src, "src")
        if dst.spec.name != src.spec.name or dst.spec.elem_shape != src.spec.elem_shape or (
            dst.spec.dtype != src.spec.dtype
        ):
            raise CopyEngineError(
                f"src pool '{src.name}' ({src.spec.elem_shape}, {src.spec.dtype}) and dst "
                f"pool '{dst.name}' ({dst.spec.elem_shape}, {dst.spec.dtype}) differ: "
                f"a copy needs the same pool on both sides"
            )
        check_slots(dst_slots, dst.num_slots, f"dst_slots for pool '{dst.name}'")
        check_slots(src_slots, src.num_slots, f"src_slots for pool '{src.name}'")
        if dst_slots.numel() != src_slots.numel():
            raise CopyEngineError(
                f"dst_slots ({dst_slots.numel()} slots) and src_slots "
                f"({src_slots.numel()} slots) for pool '{src.name}' differ in length"
            )
        count = src_slots.numel()
        if label is None:
            # Named only when something reports on the copy: formatting it costs more than a small copy.
            label = _CopyLabel(src.name, src.torch_device, dst.torch_device, count, next(self._sequence))
        if self._cpu_stream is not None:
            return self._cpu_stream.submit(label, lambda: self._copy_now(dst, dst_slots, src, src_slots), on_start)
        if on_start is not None:
            on_start()
        if count == 0:
            return CopyHandle(label, clock=self._clock)
        if self.stream is None or (src.is_host and dst.is_host):
            self._copy_now(dst, dst_slots, src, src_slots)
            return CopyHandle(label, clock=self._clock)
        return self._copy_on_stream(dst, dst_slots, src, src_slots, label)

    @staticmethod
    def _copy_now(
        dst: PoolBuffer, dst_slots: torch.Tensor, src: PoolBuffer, src_slots: torch.Tensor
    ) -> None:
        if src is not dst and src_slots.numel() > _RUN_COPY_MIN_SLOTS:
            # Page-granular allocation makes long runs contiguous on both sides:
            # a slice copy per run moves bytes at memcpy speed, unlike a gather.
            runs = _contiguous_runs(src_slots.cpu(), dst_slots.cpu())
            if len(runs) * _RUN_COPY_MIN_SLOTS <= src_slots.numel():
                for src_first, dst_first, length in runs:
                    dst.tensor[dst_first : dst_first + length].copy_(src.tensor[src_first : src_first + length])
                return
        # index_select makes a copy first, so overlapping slots in one buffer are safe.
        gathered = src.tensor.index_select(0, src_slots.to(src.torch_device))
        dst.tensor.index_copy_(0, dst_slots.to(dst.torch_device), gathered)

    def _copy_on_stream(
        self,
        dst: PoolBuffer,
        dst_slots: torch.Tensor,
        src: PoolBuffer,
        src_slots: torch.Tensor,
        label: str,
    ) -> CopyHandle:
        stream = self.stream
        assert stream is not None
        keepalive: list[object] = [dst, src]
        # Device data read here may still be being written by the caller's work.
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            if not src.is_host and not dst.is_host:
                src_index = src_slots.to(self.device, non_blocking=True)
                dst_index = dst_slots.to(self.device, non_blocking=True)
                keepalive += [src_index, dst_index]
                dst.tensor.index_copy_(0, dst_index, src.tensor.index_select(0, src_index))
            else:
                # Host side cannot be indexed by the GPU: copy runs that are
                # contiguous on both sides straight between the two buffers
                # (page-granular allocations make these whole pages).
                runs = _contiguous_runs(src_slots.cpu(), dst_slots.cpu())
                for src_first, dst_first, length in runs:
                    dst.tensor[dst_first:dst_first + length].copy_(
                        src.tensor[src_first:src_first + length], non_blocking=True
                    )
            event = torch.cuda.Event()
            event.record(stream)
        return CopyHandle(
            label, event.query, clock=self._clock, event=event, device=self.device,
            keepalive=keepalive,
        )


_STOP = object()


class _CpuCopyStream:
    """One worker thread running queued copies in order, like a CUDA copy stream."""

    def __init__(self, name: str) -> None:
        self._queue: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def submit(self, label: str, copy: Callable[[], None], on_start: Callable[[], None] | None) -> CopyHandle:
        finished = threading.Event()
        failure: list[BaseException] = []
        self._queue.put((copy, on_start, finished, failure))
        return CopyHandle(
            label,
            finished.is_set,
            waiter=finished.wait,
            error=lambda: failure[0] if failure else None,
        )

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            copy, on_start, finished, failure = item
            try:
                if on_start is not None:
                    on_start()
                copy()
            except BaseException as exc:  # reported through the handle, never lost
                failure.append(exc)
            finally:
                finished.set()

    def close(self, timeout_s: float) -> None:
        self._queue.put(_STOP)
        self.thread.join(timeout_s)
        if self.thread.is_alive():
            raise CacheTimeoutError(f"{self.thread.name} did not stop within {timeout_s}s (a copy is held or stuck)")
