"""A storage backend that keeps pages as bytes in a dict (tests, single process)."""

from __future__ import annotations

import threading
from typing import Sequence

import torch

from caches.core.pools import tensor_bytes_view
from caches.storage.base import StorageBackend, validate_key

__all__ = ["MemoryStorage"]


class MemoryStorage(StorageBackend):
    """Pages as immutable bytes under a lock; same semantics as the file backend."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._pages: dict[str, bytes] = {}

    def __repr__(self) -> str:
        return f"MemoryStorage({len(self)} pages)"

    def __len__(self) -> int:
        with self._lock:
            return len(self._pages)

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._pages)

    def _contains(self, key: str) -> bool:
        with self._lock:
            return key in self._pages

    def _get_one(self, key: str, target: torch.Tensor) -> bool:
        with self._lock:
            data = self._pages.get(key)
        if data is None:
            return False
        view = tensor_bytes_view(target)
        if len(data) != len(view):
            self.record_fault(
                key, f"size mismatch: stored page is {len(data)} bytes, target holds {len(view)}"
            )
            return False
        # bytes are immutable, so copying outside the lock is safe.
        view[:] = data
        return True

    def _set_one(self, key: str, source: torch.Tensor) -> bool:
        data = bytes(tensor_bytes_view(source))
        with self._lock:
            # A concurrent writer of the same key may have won; keep its page.
            self._pages.setdefault(key, data)
        return True

    def remove(self, keys: Sequence[str]) -> int:
        """Delete the given keys (eviction, tests); returns how many existed."""
        self._check_open()
        checked = [validate_key(key) for key in keys]
        with self._lock:
            return sum(self._pages.pop(key, None) is not None for key in checked)

    def _close(self) -> None:
        with self._lock:
            self._pages.clear()
