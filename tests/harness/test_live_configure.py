"""C1/C2 for live trees go through upstream's own parsers; checked here on upstream-shaped ones of our own."""

from __future__ import annotations

import argparse
import json
import types

import pytest

from conformance.live.layouts.hiradix.session import configure


class ServerArgs:
    """Upstream's shape: a classmethod adding every CLI flag to a parser."""

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--model-path", required=True)
        parser.add_argument("--page-size", type=int)
        parser.add_argument("--hicache-storage-prefetch-policy", choices=["best_effort", "wait_complete", "timeout"])


class HiRadixCache:
    seen: list[dict] = []

    def _parse_storage_backend_extra_config(self, text: str):
        extra = json.loads(text)
        HiRadixCache.seen.append(dict(extra))
        base = extra.pop("prefetch_timeout_base", 2.0)
        if not isinstance(base, (int, float)):
            raise ValueError(f"prefetch_timeout_base must be number, got {type(base).__name__}")
        return extra, 256, base, False


def runtime():
    module = types.SimpleNamespace(HiRadixCache=HiRadixCache)
    return types.SimpleNamespace(server_args_cls=ServerArgs, module=lambda name: {"hiradix_cache": module}[name])


def test_fields_reach_the_cli_parser_and_the_extra_config():
    HiRadixCache.seen.clear()
    configure(runtime(), {"policy": "timeout", "page_size": 4, "timeout_base_s": 1.5, "timeout_bsae_s": 9.0})
    assert HiRadixCache.seen == [{"prefetch_timeout_base": 1.5, "timeout_bsae_s": 9.0}], "an unknown field lands in the extra config, as a misspelt key would"


@pytest.mark.parametrize("fields, words", [
    ({"policy": "eager"}, "invalid choice: 'eager'"),
    ({"page_size": 2.5}, "invalid int value: '2.5'"),
    ({"timeout_base_s": "soon"}, "prefetch_timeout_base must be number, got str"),
], ids=["cli-choice", "cli-type", "extra-config"])
def test_upstream_errors_become_one_line_value_errors_in_upstream_words(fields, words):
    with pytest.raises(ValueError) as info:
        configure(runtime(), fields)
    assert words in str(info.value) and "\n" not in str(info.value)
