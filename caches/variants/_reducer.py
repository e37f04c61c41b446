"""A reducer wrapper for the variants whose defect sits in one collective: everything else goes to the cache's own."""

from __future__ import annotations

from typing import Any, Sequence


class WrappedReducer:
    """Passes every reduce to `inner`; a variant overrides the one it breaks."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.rank = inner.rank
        self.world_size = inner.world_size

    def all_reduce_max(self, values: Sequence[int], *, name: str, op: str | None = None, step: int | None = None) -> list[int]:
        return self.inner.all_reduce_max(values, name=name, op=op, step=step)

    def all_reduce_min(self, values: Sequence[int], *, name: str, op: str | None = None, step: int | None = None) -> list[int]:
        return self.inner.all_reduce_min(values, name=name, op=op, step=step)
