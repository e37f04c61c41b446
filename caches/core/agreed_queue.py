"""A queue filled by background threads and drained by the scheduler in agreed counts.

Background threads finish at different times on different ranks. Acting on
"whatever is done here" would make the ranks' trees diverge, so each drain
first agrees (MIN across ranks) on how many items every rank takes.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Generic, TypeVar

from caches.core.reducer import Reducer

T = TypeVar("T")


class AgreedQueue(Generic[T]):
    def __init__(self, reducer: Reducer, name: str) -> None:
        self._reducer = reducer
        self._name = name
        self._items: deque[T] = deque()
        self._lock = threading.Lock()

    def put(self, item: T) -> None:
        with self._lock:
            self._items.append(item)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def drain(self, step: int | None = None) -> list[T]:
        """Take the items every rank has; always one collective per call on multi-rank groups."""
        with self._lock:
            available = len(self._items)
        take = available
        if self._reducer.world_size > 1:
            take = self._reducer.all_reduce_min([available], name=self._name, step=step)[0]
        with self._lock:
            return [self._items.popleft() for _ in range(take)]
