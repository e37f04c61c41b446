"""CacheConfig validation (one-line errors naming field, value, accepted), the registry, the built-in adapters."""

from __future__ import annotations

import dataclasses
import math
from importlib.metadata import entry_points

import pytest
import torch

from caches import registry
from caches.adapters import (INDEXER_ELEM, KV_ELEM, STATE_ELEM, BuiltinAdapter, CacheSession, config_for, hi_mamba_radix, hiradix, unified_radix,
                             unified_radix_indexer_swa, unified_radix_mamba, unified_radix_swa)
from caches.config import CacheConfig
from caches.hiradix import HiRadixCache
from conformance.adapter import CacheEnv
from conformance.oracles.outcome import same_bytes
from conformance.scenarios.workload import pool_data
from spec.clock import ManualClock
from spec.config import Policy, TerminationConfig
from spec.errors import ConfigError
from spec.trace import TraceRecorder

MEMORY = {"storage_backend": "memory"}


def error_for(**fields) -> ConfigError:
    with pytest.raises(ConfigError) as err:
        CacheConfig(**{**MEMORY, **fields})
    message = str(err.value)
    assert "\n" not in message, message
    assert message == f"invalid {err.value.field}: {err.value.value!r} (accepted: {err.value.accepted})"
    return err.value


@pytest.mark.parametrize(
    ("fields", "field", "accepted_part"),
    [
        ({"page_size": 0}, "page_size", "an integer > 0"),
        ({"page_size": True}, "page_size", "an integer > 0"),
        ({"page_size": 4.0}, "page_size", "an integer > 0"),
        ({"device_pages": -1}, "device_pages", "an integer > 0"),
        ({"host_pages": "64"}, "host_pages", "an integer > 0"),
        ({"state_device_slots": 0}, "state_device_slots", "an integer > 0"),
        ({"state_host_slots": None}, "state_host_slots", "an integer > 0"),
        ({"storage_batch_pages": 0}, "storage_batch_pages", "an integer > 0"),
        ({"prefetch_threshold_pages": 0}, "prefetch_threshold_pages", "an integer > 0"),
        ({"prefetch_capacity_tokens": -8}, "prefetch_capacity_tokens", "an integer > 0"),
        ({"load_back_min_tokens": -1}, "load_back_min_tokens", "an integer >= 0"),
        ({"load_back_min_tokens": False}, "load_back_min_tokens", "an integer >= 0"),
        ({"kv_elem_shape": ()}, "kv_elem_shape", "a non-empty sequence of integers > 0"),
        ({"indexer_elem_shape": (0,)}, "indexer_elem_shape", "a non-empty sequence of integers > 0"),
        ({"state_elem_shape": "32"}, "state_elem_shape", "a non-empty sequence of integers > 0"),
        ({"dtype": "int8"}, "dtype", "'float32', 'float16', 'bfloat16'"),
        ({"write_policy": "write_around"}, "write_policy", "'write_through', 'write_through_selective', 'write_back'"),
        ({"storage_backend": "s3"}, "storage_backend", "'file', 'memory'"),
        ({"extra_pools": "indexer"}, "extra_pools", "a list drawn from 'indexer', 'mamba'"),
        ({"extra_pools": ("indexer", "lora")}, "extra_pools", "pools drawn from 'indexer', 'mamba'"),
        ({"extra_pools": ("mamba", "mamba")}, "extra_pools", "each pool at most once"),
        ({"device": "meta"}, "device", "a 'cpu' or 'cuda[:N]' device"),
        ({"device": "not a device"}, "device", "a torch device string"),
        ({"wait_timeout_s": 0}, "wait_timeout_s", "a finite number > 0"),
        ({"wait_timeout_s": math.inf}, "wait_timeout_s", "a finite number > 0"),
        ({"storage_read_timeout_s": -1.0}, "storage_read_timeout_s", "a finite number > 0"),
        ({"storage_read_timeout_s": "60"}, "storage_read_timeout_s", "a finite number > 0"),
        ({"prefetch_policy": "eager"}, "prefetch_policy", "'best_effort', 'wait_complete', 'timeout'"),
        ({"timeout_base_s": 0.0}, "timeout_base_s", "a finite number > 0"),
        ({"timeout_per_ki_token_s": -0.1}, "timeout_per_ki_token_s", "a finite number >= 0"),
        ({"timeout_max_s": math.nan}, "timeout_max_s", "a finite number > 0"),
        ({"timeout_base_s": 5.0, "timeout_max_s": 4.0}, "timeout_max_s", "a finite number >= timeout_base_s (5.0)"),
    ],
)
def test_each_bad_field_is_one_error_naming_field_value_and_accepted(fields, field, accepted_part):
    err = error_for(**fields)
    assert err.field == field
    assert accepted_part in err.accepted


def test_a_file_backend_needs_a_storage_path():
    with pytest.raises(ConfigError, match=r"^invalid storage_path: None \(accepted: a directory path when storage_backend is 'file'\)$"):
        CacheConfig()


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is visible")
def test_a_cuda_device_is_rejected_where_torch_sees_none():
    err = error_for(device="cuda:0")
    assert "torch sees no CUDA device" in err.accepted


def test_unknown_fields_are_rejected_not_ignored():
    with pytest.raises(ConfigError) as err:
        CacheConfig.from_mapping({**MEMORY, "page_sise": 8})
    assert err.value.field == "page_sise" and err.value.value == 8
    assert "page_size" in err.value.accepted and "\n" not in str(err.value)


def test_valid_fields_are_normalized_and_derived_views_agree():
    config = CacheConfig.from_mapping({**MEMORY, "page_size": 8, "kv_elem_shape": [2, 4], "extra_pools": ["indexer"],
                                       "dtype": "bfloat16", "device": "cpu", "prefetch_policy": "timeout",
                                       "timeout_base_s": 1, "timeout_per_ki_token_s": 0, "timeout_max_s": 5.5})
    assert config.kv_elem_shape == (2, 4) and config.extra_pools == ("indexer",)
    assert config.torch_dtype is torch.bfloat16
    assert config.termination == TerminationConfig(policy=Policy.TIMEOUT, page_size=8, timeout_base_s=1,
                                                    timeout_per_ki_token_s=0, timeout_max_s=5.5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.page_size = 16  # type: ignore[misc]


def test_replace_revalidates_and_leaves_the_original_alone():
    config = CacheConfig(**MEMORY)
    changed = config.replace(page_size=32, write_policy="write_back")
    assert (changed.page_size, changed.write_policy) == (32, "write_back")
    assert (config.page_size, config.write_policy) == (16, "write_through")
    with pytest.raises(ConfigError, match="invalid page_size: -1"):
        config.replace(page_size=-1)
    with pytest.raises(ConfigError, match="invalid colour"):
        config.replace(colour="blue")


# --- registry ---------------------------------------------------------------------------


def test_every_registered_adapter_builds_a_registered_cache_and_every_cache_has_one():
    # An adapter is a cache in one configuration (unified_radix runs in four component mixes).
    adapters = {ep.name: ep.load()() for ep in entry_points(group="hicache_conformance.adapters")}
    assert set(registry.CACHE_CLASSES) == {"hiradix", "unified_radix", "hi_mamba_radix"}
    built = {name: adapter.cache or adapter.name for name, adapter in adapters.items()}
    assert set(built.values()) == set(registry.CACHE_CLASSES), built
    assert {n for n, cache in built.items() if cache == "unified_radix"} == {
        "unified_radix", "unified_radix_swa", "unified_radix_mamba", "unified_radix_indexer_swa"}
    for cache in set(built.values()):
        module, cls = registry.CACHE_CLASSES[cache].split(":")
        assert module.startswith("caches.") and cls.endswith("Cache")


def test_cache_class_resolves_hiradix_and_rejects_unknown_names():
    assert registry.cache_class("hiradix") is HiRadixCache
    with pytest.raises(ConfigError) as err:
        registry.cache_class("lru")
    assert str(err.value) == "invalid cache: 'lru' (accepted: one of 'hiradix', 'unified_radix', 'hi_mamba_radix')"


def test_build_from_a_mapping_or_a_config_passes_the_runtime_parts(tmp_path):
    clock = ManualClock(3.0)
    trace = TraceRecorder(clock)
    cache = registry.build("hiradix", {"storage_path": str(tmp_path / "s"), "page_size": 8}, trace=trace, clock=clock)
    try:
        assert isinstance(cache, HiRadixCache)
        assert cache.page_size == 8 and cache.trace is trace and cache.clock is clock
        assert cache.storage.root == tmp_path / "s" / cache.storage_namespace.folder / "rank0"
        assert cache.storage.root.is_dir()
    finally:
        cache.close()
    config = CacheConfig(**MEMORY, extra_pools=("indexer",))
    cache = registry.build("hiradix", config)
    try:
        assert cache.config is config and [s.name for s in cache.specs] == ["kv", "indexer"]
    finally:
        cache.close()


def test_build_rejects_a_bad_mapping_before_building_anything(tmp_path):
    with pytest.raises(ConfigError, match="invalid write_policy"):
        registry.build("hiradix", {"storage_path": str(tmp_path / "s"), "write_policy": "sometimes"})
    assert not (tmp_path / "s").exists()


# --- built-in adapters ---------------------------------------------------------------------


def test_builtin_adapters_declare_their_pools_and_capabilities():
    common = {"multi_rank", "held_copies", "vote_groups", "kv_formats", "host_layouts", "model_names", "hold_points", "bounded_close",
              "subgroup_deployments"}
    assert hiradix() == BuiltinAdapter("hiradix", ("indexer",), frozenset({*common, "no_extra_pools", "pool:indexer"}))
    assert unified_radix().default_extra_pools == ("indexer", "mamba")
    assert hi_mamba_radix().capabilities == frozenset({*common, "pool:mamba"})
    # unified_radix in upstream's component mixes: one cache class, an adapter per mix.
    mixes = {a.name: (a.cache, a.default_extra_pools, a.capabilities - common)
             for a in (unified_radix_swa(), unified_radix_mamba(), unified_radix_indexer_swa())}
    assert mixes == {
        "unified_radix_swa": ("unified_radix", ("swa",), {"no_extra_pools", "pool:swa"}),
        "unified_radix_mamba": ("unified_radix", ("mamba",), {"no_extra_pools", "pool:mamba"}),
        "unified_radix_indexer_swa": ("unified_radix", ("indexer", "swa"), {"no_extra_pools", "pool:indexer", "pool:swa"}),
    }


def test_configure_validates_spec_named_fields_through_the_cache_config():
    adapter = hiradix()
    adapter.configure({"policy": "timeout", "page_size": 4, "timeout_base_s": 1.0})
    with pytest.raises(ConfigError, match=r"invalid prefetch_policy: 'sometimes'"):
        adapter.configure({"policy": "sometimes"})
    with pytest.raises(ConfigError, match=r"invalid timeout_max_s"):
        adapter.configure({"timeout_base_s": 3.0, "timeout_max_s": 1.0})


def make_env(tmp_path, **changes) -> CacheEnv:
    clock = ManualClock(0.0)
    env = CacheEnv(device="cpu", termination=TerminationConfig(policy="wait_complete", page_size=4), storage_dir=tmp_path / "store",
                   clock=clock, trace=TraceRecorder(clock), extra_pools=("indexer",))
    return env.with_(**changes)


def test_config_for_maps_every_env_field(tmp_path):
    env = make_env(tmp_path, device_pages=12, host_pages=20, state_slots=3, batch_pages=5, threshold_pages=2,
                   write_policy="write_back", wait_timeout_s=7.0)
    config = config_for(env)
    assert (config.page_size, config.prefetch_policy) == (4, "wait_complete")
    assert (config.device_pages, config.host_pages, config.state_device_slots, config.state_host_slots) == (12, 20, 3, 6)
    assert (config.storage_batch_pages, config.prefetch_threshold_pages) == (5, 2)
    assert (config.write_policy, config.wait_timeout_s, config.storage_read_timeout_s) == ("write_back", 7.0, 7.0)
    assert (config.storage_backend, config.storage_path) == ("file", str(tmp_path / "store"))
    assert (config.kv_elem_shape, config.indexer_elem_shape, config.state_elem_shape) == (KV_ELEM, INDEXER_ELEM, STATE_ELEM)
    assert config.termination == env.termination


def test_an_adapter_session_round_trips_through_storage(tmp_path, cache_factory):
    env = make_env(tmp_path)
    session = cache_factory.adopt(hiradix().create(env))
    assert isinstance(session, CacheSession) and set(session.pools) == {"kv", "indexer"}
    tokens = list(range(100, 112))
    data = pool_data(session.pools.values(), len(tokens), 1)
    session.write(tokens, data)
    session.flush()
    session.evict_all()
    assert session.match(tokens) == (0, 0)
    assert session.prefetch("r1", tokens) == 12
    session.wait_prefetch_io("r1")
    assert session.check_progress(["r1"]) == {"r1": 12}
    loaded = session.load_back(tokens)
    assert loaded.tokens == 12
    for name in session.pools:
        assert same_bytes(loaded.data[name], data[name]), name
    for name, (allocated, free, capacity) in session.slot_accounting().items():
        assert allocated + free == capacity, name


def test_the_file_backend_reads_under_the_configured_timeout(tmp_path):
    cache = HiRadixCache(CacheConfig(storage_path=str(tmp_path / "store"), storage_read_timeout_s=3.5))
    try:
        assert cache.storage.read_timeout_s == 3.5
    finally:
        cache.close()
