"""The recording side of one live cache instance, shared by every seam's taps.

Scheduler-side context (which operation, which step, which phase) is kept
per thread: upstream's scheduler calls are made by the test's thread, IO by
upstream's own threads. The seams' taps (host.py, controller.py, storage.py,
cache.py) wrap upstream's methods and record into this state; none changes
what the wrapped method does.
"""

from __future__ import annotations

import functools
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import torch

from conformance.live import collectives
from spec.config import TerminationConfig
from spec.trace import HOST, EventKind, TraceRecorder, page_digest

KV = "kv"
TREE = "tree"  # owner of host slots held by the radix tree


class Context(threading.local):
    op: str | None = None
    step: int | None = None
    phase: str | None = None
    voted: bool = False
    operation: Any = None  # the operation whose vote this thread casts now
    finishing: str | None = None  # the operation whose next host release ends its IO
    transferring: str | None = None  # the operation whose storage IO this (IO) thread runs
    inserting: str | None = None  # the operation whose commit inserts into the tree now


def tensor_digest(tensor: Any) -> str:
    """page_digest of a tensor's bytes (a page as upstream's backend stores it, or as its host pool holds it)."""
    return page_digest(tensor.contiguous().view(-1).view(torch.uint8).numpy().tobytes())


def wrap(obj: Any, name: str, make: Callable[[Callable], Callable]) -> None:
    """Replace obj.name (an instance attribute shadowing a method, or a queue's put) by make(original)."""
    original = getattr(obj, name)
    wrapper = make(original)
    functools.update_wrapper(wrapper, original)
    setattr(obj, name, wrapper)


class Taps:
    """What the taps of one cache instance share: the trace, the context, slot owners, the IO waiters."""

    def __init__(self, trace: TraceRecorder, termination: TerminationConfig, page_size: int) -> None:
        self.trace = trace
        self.termination = termination
        self.page_size = page_size
        self.ctx = Context()
        self.owner: dict[tuple[str, int], str] = {}  # (pool, host slot) -> operation id or TREE
        self.pools: set[str] = set()  # the pools whose IO is tracked
        self.io_done = threading.Condition()
        self.started_ops: set[str] = set()
        self.ended_ops: set[str] = set()
        self.io_thread_errors: list[str] = []
        # (thread ident, what it raised): exceptions that left one of upstream's storage-thread bodies (L5 if the thread then died)
        self.thread_errors: list[tuple[int, str]] = []
        self.step = 0
        # (pool, first host slot of a page) -> the storage file name last read into or written from it
        self.slot_keys: dict[tuple[str, int], str] = {}
        self.file_name: Callable[[str], str] = str
        self.votes: Any = None  # the cache seam's collective observer (cache.Votes), once tapped
        self.io_thread: threading.Thread | None = None  # the thread seen taking an operation (a controller may keep it in a local)

    # --- context ----------------------------------------------------------------------

    @contextmanager
    def scheduling(self, *, op: str | None = None, phase: str | None = None) -> Iterator[None]:
        saved = (self.ctx.op, self.ctx.phase)
        self.ctx.op = op if op is not None else self.ctx.op
        self.ctx.phase = phase if phase is not None else self.ctx.phase
        try:
            with collectives.active(self):
                yield
        finally:
            self.ctx.op, self.ctx.phase = saved

    @contextmanager
    def scheduler_step(self) -> Iterator[int]:
        """One scheduler check: events inside carry its step; outside it (writes, probes) they carry none."""
        self.step += 1
        self.ctx.step = self.step
        self.trace.record(EventKind.STEP, step=self.step)
        try:
            yield self.step
        finally:
            self.ctx.step = None

    def phase(self, name: str) -> Callable[[Callable], Callable]:
        """Wraps a scheduler method whose collectives are named `name`."""
        def make(original: Callable) -> Callable:
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                with self.scheduling(phase=name):
                    return original(*args, **kwargs)
            return wrapper
        return make

    # --- collectives (collectives.Observer): the cache seam names them --------------------------

    def on_reduce(self, tensor: Any) -> None:
        if self.votes is not None:
            self.votes.on_reduce(tensor)

    def on_barrier(self) -> None:
        if self.votes is not None:
            self.votes.on_barrier()

    # --- the IO of an operation ---------------------------------------------------------------

    def op_started(self, op: str) -> None:
        with self.io_done:
            self.started_ops.add(op)

    def io_finished(self, op: str) -> None:
        self.trace.record(EventKind.IO_DONE, op=op)
        with self.io_done:
            self.ended_ops.add(op)
            self.io_done.notify_all()

    def wait_io_done(self, op: str, timeout_s: float) -> bool:
        """True once upstream's threads start no more IO for op; at once when op was never queued."""
        with self.io_done:
            return self.io_done.wait_for(lambda: op in self.ended_ops or op not in self.started_ops, timeout_s)

    def wait_all_io_done(self, timeout_s: float) -> bool:
        with self.io_done:
            return self.io_done.wait_for(lambda: self.started_ops <= self.ended_ops, timeout_s)

    def end_in_parts(self, op: str | None, host_indices: Any, io: int, arrived_tokens: int, pool: str = KV) -> None:
        """IO_END of the slots that arrived (ok) and of the rest (failed)."""
        slots = host_indices.tolist()
        done, failed = slots[:arrived_tokens], slots[arrived_tokens:]
        if done:
            self.trace.record(EventKind.IO_END, op=op, pool=pool, space=HOST, slots=done, io=io, value=True)
        if failed:
            self.trace.record(EventKind.IO_END, op=op, pool=pool, space=HOST, slots=failed, io=io, value=False)

    def raising_on_thread(self, what: str) -> Callable[[Callable], Callable]:
        """Wraps a storage-thread step: an exception leaving it is noted with the thread that raised it."""
        def make(original: Callable) -> Callable:
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                try:
                    return original(*args, **kwargs)
                except BaseException as exc:
                    self.thread_errors.append((threading.get_ident(), f"{type(exc).__name__}: {exc} in {what}"))
                    raise
            return wrapper
        return make

    # --- host slots: who owns them, which page they hold ----------------------------------------

    def saw_pages(self, pool: str, keys: Any, host_indices: Any) -> None:
        """Storage IO between these host slots and these page keys: the key each page's first slot holds now."""
        slots = host_indices.tolist()
        for page, key in enumerate(keys):
            if page * self.page_size < len(slots):
                self.slot_keys[(pool, slots[page * self.page_size])] = self.file_name(key)

    def forget_slot(self, pool: str, slot: int) -> None:
        """A freed host slot's contents are gone."""
        self.slot_keys.pop((pool, slot), None)

    def inserted(self, op: str | None, slots: list[int], pool: str = KV) -> None:
        """These host slots entered the tree with the commit of op: the tree owns them now."""
        if slots:
            self.trace.record(EventKind.INSERT, op=op, pool=pool, space=HOST, slots=slots)
            for s in slots:
                self.owner[(pool, s)] = TREE

    def page_pool(self, key: str) -> str:
        """Upstream stores an extra pool's page under '<hash>.<pool>' (for a while '<hash>.PoolName.INDEXER': the enum's
        str, not its value)."""
        _, dot, suffix = key.rpartition(".")
        return suffix.lower() if dot and suffix.lower() in self.pools else KV
