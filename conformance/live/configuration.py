"""The configuration seam: ServerArgs and the storage backend's extra config, set as a user sets them.

Two entry points, both upstream's own: the fields a running session's cache
reads (server_args_fields), and C1/C2's validation of spec-named fields
through upstream's CLI parser and the class's extra-config parser
(configure_through).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
from typing import Any, Callable, Mapping

from conformance.adapter import CacheEnv
from conformance.live import shims
from conformance.live.evidence import EXTRA_CONFIG_KEYS
from conformance.live.runtime import Runtime, current


def server_args_fields(env: CacheEnv, host_ratio: float, mem_layout: str = "layer_first") -> dict[str, Any]:
    """The ServerArgs fields a user sets for this environment (hicache_* and the storage backend's extra config)."""
    t = env.termination
    extra = {
        "prefetch_threshold": env.threshold_pages * t.page_size,
        "prefetch_timeout_base": t.timeout_base_s,
        "prefetch_timeout_per_ki_token": t.timeout_per_ki_token_s,
        "prefetch_timeout_max": t.timeout_max_s,
    }
    return dict(
        device="cpu", page_size=t.page_size,
        enable_hierarchical_cache=True, hicache_ratio=host_ratio, hicache_size=0,
        hicache_io_backend="direct", hicache_mem_layout=mem_layout,
        hicache_write_policy=env.write_policy, hicache_storage_backend="file",
        hicache_storage_prefetch_policy=t.policy.value,
        hicache_storage_backend_extra_config=json.dumps(extra),
    )


def host_ratio(host_pages: int, device_pages: int, page_size: int) -> float:
    """The hicache_ratio that gives exactly `host_pages` host pages: upstream takes (int(device * ratio) // page_size + 1)
    pages; a tree whose host pool rounds its size down to a page (before 2025-09) takes int(device * ratio) // page_size."""
    runtime = current()
    if runtime is not None and not runtime.host_pool_adds_a_page:
        return (host_pages * page_size + 0.5) / (device_pages * page_size)
    return ((host_pages - 1) * page_size + 0.5) / (device_pages * page_size)


EXTRA_CONFIG = "hicache_storage_backend_extra_config"


def server_args_without_model(runtime: Runtime, env: CacheEnv, ratio: float, mem_layout: str = "layer_first") -> Any:
    """The fork's ServerArgs, its model resolution skipped (the server-args-without-model shim). A tree whose ServerArgs
    has no extra config (before 2025-08-27) reads none: its threshold and timeout are the cache's own constants."""
    fields = server_args_fields(env, ratio, mem_layout)
    if EXTRA_CONFIG not in {f.name for f in dataclasses.fields(runtime.server_args_cls)}:
        del fields[EXTRA_CONFIG]
    return shims.server_args_without_model(runtime.server_args_cls, model_path="conformance-live", **fields)


# Spec-named termination fields -> where a user of upstream sets them.
CLI_FIELDS = {"policy": "--hicache-storage-prefetch-policy", "page_size": "--page-size"}


def unparsed_extra_config(_cls: Any, text: str) -> None:
    """What a cache without an extra-config parser does with the extra config: nothing (read by no one but the backend)."""
    return None


def configure_through(runtime: Runtime, fields: Mapping[str, Any], parse_extra_config: Callable[[Any, str], Any]) -> None:
    """Validate the fields through upstream's own entry points: its CLI parser and the class's extra-config parser.

    An unknown field lands in the extra config, as a user's misspelt key would.
    Upstream's own error becomes a one-line ValueError, its words unchanged.
    """
    argv = ["--model-path", "conformance-live"]
    extra: dict[str, Any] = {}
    for name, value in fields.items():
        if name in CLI_FIELDS:
            argv += [CLI_FIELDS[name], str(value)]
        else:
            extra[EXTRA_CONFIG_KEYS.get(name, name)] = value
    parser = argparse.ArgumentParser(exit_on_error=False)
    runtime.server_args_cls.add_cli_args(parser)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            parser.parse_args(argv)
        parse_extra_config(None, json.dumps(extra))
    except (argparse.ArgumentError, SystemExit, ValueError, TypeError) as exc:
        raise ValueError(" ".join(str(exc).split())) from None
