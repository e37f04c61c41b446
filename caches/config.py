"""One validated configuration for every cache.

Built from keyword arguments or a mapping (a TOML table, CLI options); every
bad field raises spec's ConfigError naming the field, the value and what is
accepted. Unknown fields are errors, never ignored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Mapping

import torch

from spec.config import Policy, TerminationConfig, from_known_fields, require_positive_int
from spec.errors import ConfigError

WRITE_POLICIES = ("write_through", "write_through_selective", "write_back")
STORAGE_BACKENDS = ("file", "memory")
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
EXTRA_POOLS = ("indexer", "mamba", "swa")


@dataclass(frozen=True)
class CacheConfig:
    # What the stored bytes belong to: part of the storage namespace (caches/storage/namespace.py).
    # Caches of different models sharing a storage_path must name them.
    model_name: str = "unnamed"
    page_size: int = 16
    device: str = "cpu"
    device_pages: int = 64
    host_pages: int = 128
    state_device_slots: int = 32
    state_host_slots: int = 64
    kv_elem_shape: tuple[int, ...] = (2, 16)
    indexer_elem_shape: tuple[int, ...] = (8,)
    state_elem_shape: tuple[int, ...] = (32,)
    # The "swa" pool (sliding-window attention KV, TRAILING_WINDOW): a match
    # needs the last swa_window_tokens tokens of it, in whole pages; its own
    # slot group, swa_device_pages / swa_host_pages pages on each tier.
    swa_elem_shape: tuple[int, ...] = (2, 16)
    swa_window_tokens: int = 32
    swa_device_pages: int = 32
    swa_host_pages: int = 64
    dtype: str = "float32"
    # The KV pool's own dtype (a server's KV cache dtype), when it differs from `dtype`; None: `dtype`.
    kv_dtype: str | None = None
    extra_pools: tuple[str, ...] = ()
    write_policy: str = "write_through"
    prefetch_policy: str = "best_effort"
    timeout_base_s: float = 2.0
    timeout_per_ki_token_s: float = 0.1
    timeout_max_s: float = 30.0
    storage_backend: str = "file"
    storage_path: str | None = None
    storage_batch_pages: int = 4
    prefetch_threshold_pages: int = 1
    prefetch_capacity_tokens: int = 8192
    load_back_min_tokens: int = 0
    wait_timeout_s: float = 30.0
    # A storage page read on a reader thread that has not returned after this long (wall clock) fails the
    # batch it belongs to with CacheTimeoutError, so a stalled disk fails a transfer instead of hanging it.
    storage_read_timeout_s: float = 60.0
    # L4: a transfer (a KV batch, an extra pool's get) still running this long
    # after it started, on the injected clock, counts as failed at the next
    # scheduler check; its slots stay excluded until it really returns.
    io_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        for name in ("page_size", "device_pages", "host_pages", "state_device_slots", "state_host_slots",
                     "storage_batch_pages", "prefetch_threshold_pages", "prefetch_capacity_tokens",
                     "swa_window_tokens", "swa_device_pages", "swa_host_pages"):
            require_positive_int(name, getattr(self, name))
        if not isinstance(self.model_name, str) or not self.model_name.strip() or not self.model_name.isprintable():
            raise ConfigError("model_name", self.model_name, "a non-empty printable string naming the model (weights and revision)")
        if isinstance(self.load_back_min_tokens, bool) or not isinstance(self.load_back_min_tokens, int) or self.load_back_min_tokens < 0:
            raise ConfigError("load_back_min_tokens", self.load_back_min_tokens, "an integer >= 0")
        for name in ("kv_elem_shape", "indexer_elem_shape", "state_elem_shape", "swa_elem_shape"):
            object.__setattr__(self, name, _shape(name, getattr(self, name)))
        _one_of("dtype", self.dtype, tuple(DTYPES))
        if self.kv_dtype is not None:
            _one_of("kv_dtype", self.kv_dtype, tuple(DTYPES))
        _one_of("write_policy", self.write_policy, WRITE_POLICIES)
        _one_of("storage_backend", self.storage_backend, STORAGE_BACKENDS)
        object.__setattr__(self, "extra_pools", _extra_pools(self.extra_pools))
        object.__setattr__(self, "device", _device(self.device))
        if self.storage_backend == "file" and not self.storage_path:
            raise ConfigError("storage_path", self.storage_path, "a directory path when storage_backend is 'file'")
        for name in ("wait_timeout_s", "storage_read_timeout_s", "io_timeout_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ConfigError(name, value, "a finite number > 0")
        # Validates the policy and the timeout fields (spec clauses C1, C2).
        self.termination  # noqa: B018

    @property
    def termination(self) -> TerminationConfig:
        return TerminationConfig(
            policy=Policy.parse(self.prefetch_policy, "prefetch_policy"),
            page_size=self.page_size,
            timeout_base_s=self.timeout_base_s,
            timeout_per_ki_token_s=self.timeout_per_ki_token_s,
            timeout_max_s=self.timeout_max_s,
        )

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def torch_kv_dtype(self) -> torch.dtype:
        return DTYPES[self.kv_dtype or self.dtype]

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> "CacheConfig":
        return from_known_fields(cls, values)

    def replace(self, **changes: Any) -> "CacheConfig":
        return type(self).from_mapping({**{f.name: getattr(self, f.name) for f in fields(self)}, **changes})


def _shape(field: str, value: Any) -> tuple[int, ...]:
    if isinstance(value, (list, tuple)) and value and all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in value):
        return tuple(value)
    raise ConfigError(field, value, "a non-empty sequence of integers > 0")


def _one_of(field: str, value: Any, accepted: tuple[str, ...]) -> None:
    if value not in accepted:
        raise ConfigError(field, value, "one of " + ", ".join(repr(a) for a in accepted))


def _extra_pools(value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise ConfigError("extra_pools", value, "a list drawn from " + ", ".join(repr(p) for p in EXTRA_POOLS))
    for pool in value:
        if pool not in EXTRA_POOLS:
            raise ConfigError("extra_pools", pool, "pools drawn from " + ", ".join(repr(p) for p in EXTRA_POOLS))
    if len(set(value)) != len(value):
        raise ConfigError("extra_pools", list(value), "each pool at most once")
    return tuple(value)


def _device(value: Any) -> str:
    try:
        device = torch.device(value)
    except (RuntimeError, TypeError):
        raise ConfigError("device", value, "a torch device string such as 'cpu' or 'cuda:0'") from None
    if device.type not in ("cpu", "cuda"):
        raise ConfigError("device", value, "a 'cpu' or 'cuda[:N]' device")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device", value, "a visible device: torch sees no CUDA device here")
    return str(device)
