"""Collectives an upstream module calls through its own `torch.distributed`, seen by the harness.

HiMambaRadixCache, and HiRadixCache before its reduce methods
(_all_reduce_attn_groups, which the taps wrap), call torch.distributed.all_reduce
and .barrier directly, whichever pools the build has. install() gives such a
module a `torch` whose `distributed.all_reduce` and `.barrier` first tell the
Taps active on the calling thread (a scheduler call of one cache instance),
then run the real collective unchanged; the sessions install it for
HiMambaRadixCache and for every build of a HiRadixCache without the reduce
method (observe_own_collectives). Everything else is torch itself.
"""

from __future__ import annotations

import threading
import types
from contextlib import contextmanager
from typing import Any, Iterator, Protocol

import torch
import torch.distributed


class Observer(Protocol):
    def on_reduce(self, tensor: Any) -> None: ...

    def on_barrier(self) -> None: ...


_ACTIVE = threading.local()


@contextmanager
def active(observer: Observer) -> Iterator[None]:
    """Collectives this thread runs inside are reported to `observer`."""
    saved = getattr(_ACTIVE, "observer", None)
    _ACTIVE.observer = observer
    try:
        yield
    finally:
        _ACTIVE.observer = saved


def _observer() -> Observer | None:
    return getattr(_ACTIVE, "observer", None)


class _Distributed(types.SimpleNamespace):
    """torch.distributed, with all_reduce and barrier reported before they run."""

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.distributed, name)

    def all_reduce(self, tensor: Any, *args: Any, **kwargs: Any) -> Any:
        observer = _observer()
        if observer is not None:
            observer.on_reduce(tensor)
        return torch.distributed.all_reduce(tensor, *args, **kwargs)

    def barrier(self, *args: Any, **kwargs: Any) -> Any:
        observer = _observer()
        if observer is not None:
            observer.on_barrier()
        return torch.distributed.barrier(*args, **kwargs)


class _Torch(types.SimpleNamespace):
    """torch, with `distributed` observed."""

    distributed = _Distributed()

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)


OBSERVED_TORCH = _Torch()


def install(module: types.ModuleType) -> None:
    """Give `module` the observed torch (once; a module not holding torch itself is left alone)."""
    if getattr(module, "torch", None) is torch:
        module.torch = OBSERVED_TORCH
