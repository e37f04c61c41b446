"""The L3 storage interface shared by every backend.

A backend stores pages as opaque bytes under string keys. The key of a KV page
is its page hash (64 lowercase hex digits); an extra pool's page is stored as
``<hash>.<pool>``. Gets read straight into caller-provided CPU tensors (slices
of a host pool buffer); a page whose stored size or header does not fit is a
miss and is reported in ``backend.faults``, never a partial hit.
"""

from __future__ import annotations

import abc
import re
import threading
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import torch

from caches.errors import StorageClosedError, StorageConfigError, StorageError, StorageKeyError, StorageTensorError
from spec.errors import bounded_repr

__all__ = [
    "StorageBackend",
    "StorageError",
    "StorageKeyError",
    "StorageConfigError",
    "StorageTensorError",
    "StorageClosedError",
    "StorageFault",
    "FaultLog",
    "PoolTransfer",
    "validate_key",
    "pool_key",
]

# A pool name is short: a key is a file name on some backends (at most 255 bytes).
MAX_POOL_NAME = 32
KEY_PATTERN = re.compile(r"[0-9a-f]{64}(?:\.[a-z][a-z0-9_]{0,%d})?" % (MAX_POOL_NAME - 1))
PAGE_HASH_PATTERN = re.compile(r"[0-9a-f]{64}")
POOL_NAME_PATTERN = re.compile(r"[a-z][a-z0-9_]{0,%d}" % (MAX_POOL_NAME - 1))


@dataclass(frozen=True)
class StorageFault:
    """A stored page that could not be served (corrupt, foreign or wrong size)."""

    key: str
    reason: str


class FaultLog:
    """A thread-safe, append-only list of :class:`StorageFault`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[StorageFault] = []

    def append(self, fault: StorageFault) -> None:
        with self._lock:
            self._items.append(fault)

    def snapshot(self) -> list[StorageFault]:
        with self._lock:
            return list(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def __iter__(self) -> Iterator[StorageFault]:
        return iter(self.snapshot())

    def __getitem__(self, index: int) -> StorageFault:
        with self._lock:
            return self._items[index]

    def __repr__(self) -> str:
        return f"FaultLog({self.snapshot()!r})"


def validate_key(key: object) -> str:
    """Return ``key`` if it is a valid storage key, else raise :class:`StorageKeyError`."""
    if not isinstance(key, str) or KEY_PATTERN.fullmatch(key) is None:
        shown = key if isinstance(key, str) else f"{key!r} ({type(key).__name__})"
        raise StorageKeyError(
            f"storage key '{shown}' is invalid: expected 64 lowercase hex digits, "
            f"optionally followed by '.<pool>' (a lowercase identifier of at most {MAX_POOL_NAME} characters)"
        )
    return key


def _validate_pool(pool: object) -> str:
    if not isinstance(pool, str) or POOL_NAME_PATTERN.fullmatch(pool) is None:
        raise StorageKeyError(
            f"pool name {bounded_repr(pool)} is invalid: expected a lowercase identifier "
            f"matching [a-z][a-z0-9_]* of at most {MAX_POOL_NAME} characters"
        )
    return pool


def pool_key(page_hash: str, pool: str) -> str:
    """The storage key of ``pool``'s page at ``page_hash``: the bare hash for 'kv'."""
    _validate_pool(pool)
    if not isinstance(page_hash, str) or PAGE_HASH_PATTERN.fullmatch(page_hash) is None:
        raise StorageKeyError(
            f"page hash {bounded_repr(page_hash)} for pool '{pool}' is invalid: expected 64 "
            f"lowercase hex digits (the pool suffix is added by pool_key)"
        )
    return page_hash if pool == "kv" else f"{page_hash}.{pool}"


@dataclass
class PoolTransfer:
    """The pages of one pool in a multi-pool get or set.

    ``keys`` are bare page hashes; the backend stores them under
    ``pool_key(hash, pool)``. ``tensors[i]`` is the CPU memory of page i.
    """

    pool: str
    keys: list[str]
    tensors: list[torch.Tensor] = field(repr=False)

    def __post_init__(self) -> None:
        _validate_pool(self.pool)
        self.keys = list(self.keys)
        self.tensors = list(self.tensors)
        if len(self.keys) != len(self.tensors):
            raise StorageTensorError(
                f"PoolTransfer for pool '{self.pool}' has {len(self.keys)} keys and "
                f"{len(self.tensors)} tensors: expected one tensor per key"
            )

    def storage_keys(self) -> list[str]:
        return [pool_key(page_hash, self.pool) for page_hash in self.keys]


def _check_tensors(
    keys: Sequence[str], tensors: Sequence[torch.Tensor], role: str
) -> None:
    if len(keys) != len(tensors):
        raise StorageTensorError(
            f"{len(keys)} keys and {len(tensors)} {role}s given: expected one {role} per key"
        )
    for key, tensor in zip(keys, tensors):
        if not isinstance(tensor, torch.Tensor):
            raise StorageTensorError(
                f"{role} for key '{key}' is a {type(tensor).__name__}: expected a CPU tensor"
            )
        if not tensor.is_cpu:
            raise StorageTensorError(
                f"{role} for key '{key}' is on device '{tensor.device}': storage "
                f"transfers use host (cpu) memory"
            )
        if not tensor.is_contiguous():
            raise StorageTensorError(
                f"{role} for key '{key}' (shape {tuple(tensor.shape)}, strides "
                f"{tensor.stride()}) is not contiguous: expected a contiguous tensor "
                f"such as PoolBuffer.page_view(...)"
            )


class StorageBackend(abc.ABC):
    """Page storage keyed by page hash. Backends implement the four primitives.

    Public methods validate every key and tensor first (nothing is transferred
    when one is invalid) and are safe to call from several threads.
    """

    def __init__(self) -> None:
        self.faults = FaultLog()
        self._closed = False

    # -- primitives a backend implements (keys and tensors already validated) --

    @abc.abstractmethod
    def _contains(self, key: str) -> bool:
        """Whether ``key`` is stored."""

    @abc.abstractmethod
    def _get_one(self, key: str, target: torch.Tensor) -> bool:
        """Read ``key``'s page into ``target``; on a bad page record a fault and miss."""

    @abc.abstractmethod
    def _set_one(self, key: str, source: torch.Tensor) -> bool:
        """Store ``source``'s bytes under ``key`` (not present when called)."""

    def _close(self) -> None:
        """Release backend resources."""

    # -- public interface --

    def _check_open(self) -> None:
        if self._closed:
            raise StorageClosedError(f"{type(self).__name__} was used after close()")

    def record_fault(self, key: str, reason: str) -> None:
        self.faults.append(StorageFault(key, reason))

    def exists_prefix(self, keys: Sequence[str]) -> int:
        """Number of leading keys present; stops at the first miss."""
        self._check_open()
        keys = [validate_key(key) for key in keys]
        count = 0
        for key in keys:
            if not self._contains(key):
                break
            count += 1
        return count

    def get(self, keys: Sequence[str], targets: Sequence[torch.Tensor]) -> list[bool]:
        """Read each key's page into its target tensor; per-key success.

        A target whose key missed holds unspecified bytes afterwards.
        """
        self._check_open()
        keys = [validate_key(key) for key in keys]
        _check_tensors(keys, targets, "target")
        return self._get_many(keys, list(targets))

    def _get_many(self, keys: list[str], targets: list[torch.Tensor]) -> list[bool]:
        """Read validated pages; a backend may override to read several at once."""
        return [self._get_one(key, target) for key, target in zip(keys, targets)]

    def set(self, keys: Sequence[str], sources: Sequence[torch.Tensor]) -> list[bool]:
        """Store each source under its key; an existing key is kept (reported True)."""
        self._check_open()
        keys = [validate_key(key) for key in keys]
        _check_tensors(keys, sources, "source")
        return [
            True if self._contains(key) else self._set_one(key, source)
            for key, source in zip(keys, sources)
        ]

    def get_v2(self, transfers: Sequence[PoolTransfer]) -> list[list[bool]]:
        """Multi-pool get: one success list per transfer, in order."""
        self._check_open()
        batches = [(t.storage_keys(), t.tensors) for t in transfers]
        for keys, tensors in batches:
            _check_tensors(keys, tensors, "target")
        return [self.get(keys, tensors) for keys, tensors in batches]

    def set_v2(self, transfers: Sequence[PoolTransfer]) -> list[list[bool]]:
        """Multi-pool set: one success list per transfer, in order."""
        self._check_open()
        batches = [(t.storage_keys(), t.tensors) for t in transfers]
        for keys, tensors in batches:
            _check_tensors(keys, tensors, "source")
        return [self.set(keys, tensors) for keys, tensors in batches]

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._close()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> "StorageBackend":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
