"""state_attached_locally: hi_mamba_radix whose commit attaches the mamba state by its own rank's transfer, whatever its peers'.

The commit collective agrees the committed length and, for each trailing
pool, whether every rank loaded its state for exactly that length (F4).
Here the commit collective carries that agreement for the length only: each
rank reads back its own loaded length for the state, a rank-local flag, as
upstream's HiMambaRadixCache acts on its `mamba_loaded`: a rank whose state
transfer landed attaches the state, while a peer whose transfer was still in
flight (or failed) drops its own, so after the same commit the ranks serve
different prefixes. With one rank it behaves exactly like hi_mamba_radix.

Must be caught by: F4 (a state kept on some ranks only), in the cross-rank
exploration where the ranks' state transfers end differently around the
commit (conformance/suite/test_crossrank.py).
"""

from __future__ import annotations

from typing import Any, Sequence

from caches.hi_mamba_radix import HiMambaRadixCache
from caches.variants._adapter import VariantAdapter, variant_of
from caches.variants._reducer import WrappedReducer
from spec.fence import COMMIT_COLLECTIVE


class LocalFlagReducer(WrappedReducer):
    def all_reduce_min(self, values: Sequence[int], *, name: str, op: str | None = None, step: int | None = None) -> list[int]:
        reduced = self.inner.all_reduce_min(values, name=name, op=op, step=step)
        if name != COMMIT_COLLECTIVE:
            return reduced
        return [reduced[0], *values[1:]]  # the defect: each trailing pool's loaded length is this rank's own


class StateAttachedLocallyCache(HiMambaRadixCache):
    name = "state_attached_locally"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commit.reducer = LocalFlagReducer(self.commit.reducer)


def state_attached_locally() -> VariantAdapter:
    return variant_of("hi_mamba_radix", "state_attached_locally", StateAttachedLocallyCache)
