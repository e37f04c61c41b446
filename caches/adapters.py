"""The built-in caches as conformance adapters.

They satisfy conformance/adapter.py's protocol structurally, without importing
the harness: caches depend on spec only. Registered as entry points in
pyproject.toml, so the harness finds them like any third-party adapter.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:  # importing this module stays light: a harness process that only lists adapters never loads torch
    import torch

    from caches.config import CacheConfig
    from caches.core.cache_base import HierarchicalCache
    from spec.decision import DecisionState

# Small elements keep the suite fast; shapes and dtypes still differ per pool.
KV_ELEM = (2, 4)
# CacheEnv.kv_format -> (KV dtype, KV element shape, model): another configuration's pages, differing in one respect only.
# The dtype is the KV pool's alone (a server's KV cache dtype); the other pools keep theirs.
# 'layout': a token's 8 values as 4 x 2 instead of 2 x 4, the same bytes per page in another order.
# 'dtype_same_width': float16, as wide as 'dtype''s bfloat16. 'model': the same format, another model's.
KV_FORMATS = {"default": ("float32", KV_ELEM, "unnamed"), "dtype": ("bfloat16", KV_ELEM, "unnamed"),
              "dtype_same_width": ("float16", KV_ELEM, "unnamed"), "layout": ("float32", (4, 2), "unnamed"),
              "model": ("float32", KV_ELEM, "another-model")}
INDEXER_ELEM = (3,)
STATE_ELEM = (6,)
SWA_ELEM = (2, 3)
SWA_WINDOW_PAGES = 2  # the sliding window: two pages before a match end


# How a scheduler over these caches drops a waiting request: one path, whatever the reason, and it releases the prefetch.
ABORT_PATHS = {"release_aborted_request": "the scheduler drops the waiting request and calls the cache's release_aborted_request"}


@dataclass(frozen=True)
class LoadedPrefix:
    tokens: int
    data: Mapping[str, torch.Tensor] = field(default_factory=dict)


def config_for(env: Any) -> CacheConfig:
    from caches.config import CacheConfig

    t = env.termination
    kv_dtype, kv_elem, model = KV_FORMATS[getattr(env, "kv_format", "default")]
    return CacheConfig(
        model_name=model,
        page_size=t.page_size,
        kv_dtype=kv_dtype,
        device=env.device,
        device_pages=env.device_pages,
        host_pages=env.host_pages,
        state_device_slots=env.state_slots,
        state_host_slots=env.state_slots * 2,
        kv_elem_shape=kv_elem,
        indexer_elem_shape=INDEXER_ELEM,
        state_elem_shape=STATE_ELEM,
        swa_elem_shape=SWA_ELEM,
        swa_window_tokens=SWA_WINDOW_PAGES * t.page_size,
        swa_device_pages=env.device_pages,
        swa_host_pages=env.host_pages,
        extra_pools=tuple(env.extra_pools),
        write_policy=env.write_policy,
        prefetch_policy=t.policy.value,
        timeout_base_s=t.timeout_base_s,
        timeout_per_ki_token_s=t.timeout_per_ki_token_s,
        timeout_max_s=t.timeout_max_s,
        storage_backend="file",
        storage_path=str(env.storage_dir),
        storage_batch_pages=env.batch_pages,
        prefetch_threshold_pages=env.threshold_pages,
        wait_timeout_s=env.wait_timeout_s,
        storage_read_timeout_s=env.wait_timeout_s,
        io_timeout_s=env.io_timeout_s,
    )


class CacheSession:
    """One cache instance behind the harness's CacheUnderTest protocol."""

    def __init__(self, cache: HierarchicalCache) -> None:
        self.cache = cache
        self.pools = {spec.name: spec for spec in cache.specs}

    def write(self, tokens: Sequence[int], data: Mapping[str, torch.Tensor]) -> None:
        self.cache.write(tokens, data)

    def flush(self) -> None:
        self.cache.flush()

    def evict_all(self) -> None:
        self.cache.evict_all()

    def match(self, tokens: Sequence[int]) -> tuple[int, int]:
        m = self.cache.match_prefix(tokens)
        return m.device_hit_tokens, m.host_hit_tokens

    def prefetch(self, request_id: str, tokens: Sequence[int]) -> int:
        return self.cache.prefetch_from_storage(request_id, tokens)

    def wait_prefetch_io(self, request_id: str) -> None:
        self.cache.wait_prefetch_io(request_id)

    def check_progress(self, request_ids: Sequence[str]) -> dict[str, int]:
        return self.cache.check_prefetch_progress(request_ids)

    def abort(self, request_id: str) -> None:
        self.cache.release_aborted_request(request_id)

    def abort_by(self, request_id: str, path: str) -> None:
        """The scheduler drops a waiting request (ABORT_PATHS: these caches' one path releases it)."""
        if path not in ABORT_PATHS:
            raise ValueError(f"invalid abort path: {path!r} (accepted: {', '.join(ABORT_PATHS)})")
        self.abort(request_id)

    def load_back(self, tokens: Sequence[int]) -> LoadedPrefix:
        m = self.cache.match_prefix(tokens)
        if m.needs_load_back:  # KV, or a sliding window under device KV, on the host only (F10)
            self.cache.load_back(m.host_node)
            self.cache.copies.wait()  # a copy that failed takes its path off the device again: read what is left
            m = self.cache.match_prefix(tokens)
        data = self.cache.read_device(m.device_slots, state_node=m.device_node)
        return LoadedPrefix(tokens=m.device_hit_tokens, data=data)

    def make_operation(self, state: DecisionState, *, start_time: float) -> Any:
        return self.cache.make_probe_operation(state, start_time=start_time)

    def can_terminate(self, operation: Any) -> bool:
        return self.cache.can_terminate_prefetch(operation)

    def slot_accounting(self) -> Mapping[str, tuple[int, int, int]]:
        return self.cache.slot_accounting()

    def threads(self) -> Sequence[threading.Thread]:
        return self.cache.threads()

    def background_errors(self) -> list[str]:
        return self.cache.background_errors()

    def close(self) -> None:
        self.cache.close()


def _declared_at(cls: type, attribute: str) -> str:
    """'<module path>.py: <Class>.<attribute> = <value>', naming the class in cls's MRO that sets it."""
    owner = next(c for c in cls.__mro__ if attribute in vars(c))
    return f"{owner.__module__.replace('.', '/')}.py: {owner.__name__}.{attribute} = {vars(owner)[attribute]!r}"


@dataclass(frozen=True)
class BuiltinAdapter:
    """A built-in cache in one configuration: `name` is the adapter's, `cache` the cache class's (default: the name)."""

    name: str
    default_extra_pools: tuple[str, ...]
    capabilities: frozenset[str]
    cache: str = ""

    @property
    def preload_modules(self) -> tuple[str, ...]:
        """What every rank process imports anyway: the harness imports it once, in the process ranks fork from."""
        from caches.registry import CACHE_CLASSES

        own = CACHE_CLASSES.get(self.cache or self.name)  # a variant's class lives elsewhere: the shared core still is most of it
        return ("caches.core.cache_base", *([own.split(":")[0]] if own else []))

    @property
    def abort_paths(self) -> Mapping[str, str]:
        return ABORT_PATHS

    @property
    def vote_group_rule(self) -> str:
        """The groups this cache reduces its votes over (X2: spec/groups.py)."""
        return self.cache_class().vote_group_rule

    @property
    def vote_group_evidence(self) -> tuple[str, ...]:
        return (_declared_at(self.cache_class(), "vote_group_rule"),)

    @property
    def deployment(self) -> Mapping[str, tuple[bool, tuple[str, ...]]]:
        """The scenario preconditions this cache's deployment does not produce (spec/preconditions.py), where its class says so."""
        cls = self.cache_class()
        # A class that says nothing serves models that may run attention context parallelism: it is judged there.
        if getattr(cls, "runs_attention_context_parallel", True):
            return {}
        return {"attention_cp_with_dp_attention": (False, (
            f"{_declared_at(cls, 'runs_attention_context_parallel')}: the models it serves run no attention "
            f"context parallelism, so its tp group spans every rank that holds a request",))}

    def configure(self, fields: Mapping[str, Any]) -> None:
        """Validate spec-named termination fields through this cache's own config."""
        from caches.config import CacheConfig

        names = {"policy": "prefetch_policy"}
        mapped = {names.get(k, k): v for k, v in fields.items()}
        CacheConfig.from_mapping({"storage_backend": "memory", **mapped})

    def cache_class(self) -> type[HierarchicalCache]:
        from caches.registry import cache_class

        return cache_class(self.cache or self.name)

    def create(self, env: Any) -> CacheSession:
        cls = self.cache_class()
        groups = getattr(env, "process_groups", None)
        if groups is not None:  # several vote groups (spec/groups.py): the cache creates and reduces over them
            return CacheSession(cls(config_for(env), trace=env.trace, clock=env.clock, process_groups=groups))
        cache = cls(config_for(env), trace=env.trace, clock=env.clock, process_group=env.process_group)
        return CacheSession(cache)


_COMMON = frozenset({"multi_rank", "held_copies", "vote_groups", "kv_formats", "host_layouts", "model_names", "hold_points",
                     "bounded_close", "subgroup_deployments"})


_KV_ALONE = frozenset({"no_extra_pools"})  # every built-in cache but hi_mamba_radix (its mamba state is required)


def hiradix() -> BuiltinAdapter:
    return BuiltinAdapter("hiradix", ("indexer",), _COMMON | _KV_ALONE | {"pool:indexer"})


def unified_radix() -> BuiltinAdapter:
    return BuiltinAdapter("unified_radix", ("indexer", "mamba"), _COMMON | _KV_ALONE | {"pool:indexer", "pool:mamba"})


# unified_radix in the component mixes of upstream's hybrid models: full attention with a sliding window
# (Gemma- and GPT-OSS-style interleaved layers), with mamba, and with an indexer and a sliding window.
def unified_radix_swa() -> BuiltinAdapter:
    return BuiltinAdapter("unified_radix_swa", ("swa",), _COMMON | _KV_ALONE | {"pool:swa"}, cache="unified_radix")


def unified_radix_mamba() -> BuiltinAdapter:
    return BuiltinAdapter("unified_radix_mamba", ("mamba",), _COMMON | _KV_ALONE | {"pool:mamba"}, cache="unified_radix")


def unified_radix_indexer_swa() -> BuiltinAdapter:
    return BuiltinAdapter("unified_radix_indexer_swa", ("indexer", "swa"), _COMMON | _KV_ALONE | {"pool:indexer", "pool:swa"}, cache="unified_radix")


def hi_mamba_radix() -> BuiltinAdapter:
    return BuiltinAdapter("hi_mamba_radix", ("mamba",), _COMMON | {"pool:mamba"})
