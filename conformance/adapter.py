"""The adapter protocol: the only way the harness reaches an implementation.

An implementation plugs in with a factory (a callable returning a
CacheAdapter), named either on the command line

    pytest conformance/ --cache-impl my_package.my_module:factory

or as an entry point in the group ENTRY_POINT_GROUP of its own package. The
three built-in caches plug in the same way (see this project's pyproject.toml).
Nothing here imports an implementation; types come from spec/ and torch.

Trace contract: an implementation records spec.trace events into env.trace
(spec/SPEC.md, "Trace contract") and calls env.trace.gate(event) after each
IO_START, outside its locks, so the harness can hold or fail any transfer.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Protocol, Sequence, runtime_checkable

from conformance.bounds import WAIT_S
from spec.clock import Clock
from spec.config import TerminationConfig
from spec.decision import DecisionState
from spec.errors import ConfigError
from spec.fence import HitPolicy
from spec.trace import TraceRecorder

if TYPE_CHECKING:  # the pytest plugin imports this in every process, the xdist controller included: no torch there
    import torch

ENTRY_POINT_GROUP = "hicache_conformance.adapters"

# Factories that turn a checkout of another project into adapters, by entry
# point name (`--sglang PATH` uses the one named "sglang"):
#   factory(path) -> (adapters, [(adapter name, why it is missing)])
# A class the checkout lacks is reported, not raised; a bad path or code the
# factory cannot run raises one ValueError line.
CHECKOUT_ENTRY_POINT_GROUP = "hicache_conformance.checkout_adapters"

# Capabilities an adapter may declare; tests needing one skip (with a reason) without it.
CAPABILITIES = {
    "pool:indexer": "runs with an ALL_PAGES side pool that reuses the KV slot numbers",
    "pool:mamba": "runs with a TRAILING_PAGES state pool (one state per prefix end)",
    "pool:swa": "runs with a TRAILING_WINDOW token pool (sliding-window KV: only the window before a match end)",
    "multi_rank": "accepts a torch.distributed process group (env.process_group)",
    "vote_groups": "accepts several vote groups (env.process_groups: tp, attn_tp, attn_cp rank partitions) and reduces over each",
    "held_copies": "host->device copies run on a copy stream a trace gate can hold (CPU path)",
    "stepped_backups": "a scheduler step (check_progress) starts the storage backup of a host copy already acknowledged, so a trace gate can hold one while later requests change the tree",
    "kv_formats": "builds a cache whose KV pages differ from its default only in dtype (env.kv_format 'dtype'), and one whose KV dtype is another of the same width as that one's ('dtype_same_width')",
    "model_names": "builds a cache for another model whose pages have its default's format (env.kv_format 'model')",
    "host_layouts": "builds a cache whose KV pages hold the same bytes as its default's in another order (env.kv_format 'layout': another host memory layout)",
    "no_extra_pools": "runs with no extra pool when env.extra_pools is empty: KV alone",
    "bounded_close": "close() ends every thread it started within env.wait_timeout_s, or raises saying it did not (a runtime close, not a process-exit hook that logs and returns while daemon threads die with the process)",
    "subgroup_deployments": "builds its cache over an env.process_group that holds some of the world's ranks (one deployment of several in one world), on those ranks alone",
    "hold_points": "gates io_landed (a load's storage call returned, its end not yet published), io_end and terminate (spec/SPEC.md, trace contract)",
}

# An adapter that declares no abort paths (`abort_paths`) drops a request one way: its `abort`.
DEFAULT_ABORT_PATH = "abort"


def adapter_abort_paths(adapter: Any) -> Mapping[str, Any]:
    """Each way the implementation's scheduler drops a waiting request: its optional `abort_paths`, else its one `abort`."""
    return getattr(adapter, "abort_paths", None) or {DEFAULT_ABORT_PATH: "the implementation's abort (the request is gone)"}


def abort_by(adapter: Any, cache: Any, request_id: str, path: str) -> None:
    """Drop the request by one of the adapter's abort paths (the instance's `abort_by`), or by `abort` where it declares none."""
    if getattr(adapter, "abort_paths", None):
        cache.abort_by(request_id, path)
    else:
        cache.abort(request_id)


# The page size every scenario runs an implementation at, unless its adapter declares its own (`page_size`).
DEFAULT_PAGE_SIZE = 4


def adapter_page_size(adapter: Any) -> int:
    """The page size the adapter's implementation runs at: its optional `page_size`, else DEFAULT_PAGE_SIZE.

    An implementation whose code fixes the page size (a device pool that
    asserts one) declares it, and every scenario then runs at that size.
    """
    value = getattr(adapter, "page_size", None)
    if value is None:
        return DEFAULT_PAGE_SIZE
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{getattr(adapter, 'name', 'adapter')}.page_size", value, "a positive int (the page size the implementation runs at)")
    return value


# CacheEnv.kv_format values: the page format a cache stores, relative to the adapter's default.
KV_FORMATS = {
    "default": "the adapter's own format",
    "dtype": "the same per-token layout, another KV dtype",
    # fp16 and bf16 (or the two fp8 kinds): pages of the same length, so only the dtype's name tells them apart.
    "dtype_same_width": "another KV dtype of the same width as 'dtype''s (its writer stores 'dtype')",
    # Two models of one architecture: their pages have one format, and only the model's name tells them apart.
    "model": "the adapter's own format, another model's pages",
    # A deployment switches it with one flag: upstream's --hicache-mem-layout (layer_first, page_first) stores a page's
    # bytes in another order; the same bytes per page, so nothing but the format's name tells the two apart.
    "layout": "the same dtype and bytes per page, stored in another order (another host memory layout)",
}


@dataclass(frozen=True)
class CacheEnv:
    """Everything the harness decides for one cache instance."""

    device: str
    termination: TerminationConfig
    storage_dir: Path
    clock: Clock
    trace: TraceRecorder
    extra_pools: tuple[str, ...] = ()
    rank: int = 0
    world_size: int = 1
    process_group: Any = None
    # Several vote groups instead of one (adapters with "vote_groups"): kind (tp, attn_tp, attn_cp) -> the
    # partition of the global ranks into groups of that kind; the cache creates the groups (spec/groups.py).
    process_groups: Mapping[str, Sequence[Sequence[int]]] | None = None
    device_pages: int = 32
    host_pages: int = 32
    state_slots: int = 16
    batch_pages: int = 2
    threshold_pages: int = 1
    write_policy: str = "write_through"
    wait_timeout_s: float = WAIT_S
    # L4: a transfer still running this long after it started (on `clock`) counts as failed.
    # Generous by default: only tests of L4 make a transfer outlive it.
    io_timeout_s: float = 600.0
    # KV_FORMATS: pages of another configuration, for adapters declaring "kv_formats" (S6).
    kv_format: str = "default"

    @property
    def page_size(self) -> int:
        return self.termination.page_size

    def with_(self, **changes: Any) -> "CacheEnv":
        return replace(self, **changes)


@dataclass(frozen=True)
class PoolLayout:
    """One pool as the harness sees it: enough to generate data and compare bytes."""

    name: str
    unit: str  # "token" (one row per token) or "state" (one row per prefix end)
    elem_shape: tuple[int, ...]
    dtype: torch.dtype
    hit_policy: HitPolicy
    # TRAILING_WINDOW: the tokens before a match end the pool must hold (whole pages); 0 for every other pool.
    window_tokens: int = 0
    # Every rank of a tensor-parallel group holds the same rows (a latent KV or an index not sharded by head, as
    # MLA/DSA models keep them), so one rank's copy in storage serves all; False: each rank holds its own shard.
    rank_replicated: bool = False


@dataclass(frozen=True)
class Loaded:
    """What load-back put on the device for the longest usable match.

    tokens: length of that match; data[pool]: device bytes (token pools: [tokens,
    *elem]; state pools: [1, *elem], present only when a state was loaded for
    exactly that length; window pools: [min(window_tokens, tokens), *elem], the
    rows of the window before the match end).
    """

    tokens: int
    data: Mapping[str, torch.Tensor] = field(default_factory=dict)


@runtime_checkable
class CacheUnderTest(Protocol):
    pools: Mapping[str, PoolLayout]

    def write(self, tokens: Sequence[int], data: Mapping[str, torch.Tensor]) -> None:
        """A request's data for tokens enters the device tier (state pools: [1, *elem])."""

    def flush(self) -> None:
        """Bounded wait until every backup begun so far reached host and storage."""

    def evict_all(self) -> None:
        """Empty device and host tiers; storage keeps its pages."""

    def match(self, tokens: Sequence[int]) -> tuple[int, int]:
        """(device-hit tokens, host-hit tokens) of the longest usable match."""

    def prefetch(self, request_id: str, tokens: Sequence[int]) -> int:
        """Queue a prefetch from storage; returns tokens requested (0: none queued)."""

    def wait_prefetch_io(self, request_id: str) -> None:
        """Bounded wait until the implementation starts no more IO for the prefetch."""

    def check_progress(self, request_ids: Sequence[str]) -> dict[str, int]:
        """One scheduler step over an agreed id list; finished ids -> committed tokens."""

    def abort(self, request_id: str) -> None:
        """The request is gone; its prefetch stops and every slot returns."""

    def load_back(self, tokens: Sequence[int]) -> Loaded:
        """Load the host part of the longest match to the device and read it back."""

    def make_operation(self, state: DecisionState, *, start_time: float) -> Any:
        """A real prefetch operation placed in `state` (not registered as ongoing)."""

    def can_terminate(self, operation: Any) -> bool:
        """The implementation's own can_terminate_prefetch on that operation."""

    def slot_accounting(self) -> Mapping[str, tuple[int, int, int]]:
        """(allocated, free, capacity) per tier and slot group."""

    def threads(self) -> Sequence[threading.Thread]:
        """Threads this instance started (all must be gone after close)."""

    def close(self) -> None:
        """Stop every thread; release every slot."""


@runtime_checkable
class CacheAdapter(Protocol):
    name: str
    capabilities: frozenset[str]
    # Extra pools the harness enables by default for this implementation.
    default_extra_pools: tuple[str, ...]

    def create(self, env: CacheEnv) -> CacheUnderTest: ...


# Optional on a CacheUnderTest:
#   background_errors() -> Sequence[str]
# one line per unexpected exception its background threads hit (a bug, as
# opposed to a storage fault, which is a failed transfer). make_cache's
# teardown fails the test when it lists any.

# Optional on an adapter:
#   io_order: str
# the order the implementation's IO thread loads a prefetch in, one of
# conformance.scenarios.schedule_model.IO_ORDERS ("kv_then_extras", the default, or
# "extras_with_each_batch"); the exploration's expected schedule counts follow
# it, and tests that drive IO in another order skip (ADAPTERS.md, "IO order").

# Optional on an adapter:
#   page_size: int | None
# the one page size the implementation runs at (DEFAULT_PAGE_SIZE when absent or None):
# make_cache's default, and the `page_size` fixture every scenario sizes its
# requests, batches and checks by.

# Optional on an adapter:
#   preload_modules: Sequence[str]
# modules every rank process of a multi-rank test would import (the cache's
# own); imported once in the process the ranks fork from.

# Optional on an adapter (tests needing it skip with a reason when absent):
#   configure(fields: Mapping[str, Any]) -> None
# builds the implementation's own configuration from spec-named termination
# fields (policy, page_size, timeout_base_s, timeout_per_ki_token_s,
# timeout_max_s) through the implementation's own entry point, raising a
# ValueError with one line naming the field and value for bad input.
