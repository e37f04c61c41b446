"""A page of another configuration found in this one's storage: moved in under the same name, the same length.

Two servers of one format but another model store the same tokens, each
its own bytes. One page file of the other's is then copied over this
cache's file of that page (an operator copying a directory, a sync job, a
restore from the wrong backup). Its length and its checksum, bound to its
key, are right; only what it says of its namespace differs. The reader
must treat it as a miss: at most the pages before it are committed, and
everything served is its own bytes (S6, with S7's header check beside it).
"""

from __future__ import annotations

import shutil

import pytest

from conformance.scenarios.races import close_and_check_trace, page_write_keys
from conformance.scenarios.workload import drive, request_data, request_tokens, store
from conformance.oracles.outcome import assert_loaded_bytes
from spec.config import TerminationConfig

PAGES = 4


@pytest.mark.precondition("shared_storage_across_configs")
@pytest.mark.needs("model_names")
@pytest.mark.clause("S6", "S7", "S5", "F3")
@pytest.mark.parametrize("moved", ["first_written", "last_written"])
def test_a_page_moved_in_from_another_configuration_is_a_miss(impl, make_cache, trace, tmp_path, moved, page_size):
    shared = tmp_path / "shared-storage"
    config = TerminationConfig(policy="wait_complete", page_size=page_size)
    tokens = request_tokens(88, PAGES * page_size)
    other = make_cache(termination=config, storage_dir=shared, kv_format="model")
    store(other, tokens, request_data(other, tokens, 89))
    other.close()
    theirs = {p: p.read_bytes() for p in shared.rglob("*") if p.is_file()}
    cache = make_cache(termination=config, storage_dir=shared)
    data = request_data(cache, tokens, 88)
    store(cache, tokens, data)
    keys = list(dict.fromkeys(page_write_keys(trace, "kv")))[-PAGES:]
    key = keys[0] if moved == "first_written" else keys[-1]
    mine = [p for p in shared.rglob("*") if p.is_file() and p.name.endswith(key) and p not in theirs]
    source = [p for p in theirs if p.name.endswith(key)]
    if len(mine) != 1 or len(source) != 1:
        pytest.skip(f"{impl.name} keeps no single file per configuration named after page key {key[:16]}... ({len(source)} and {len(mine)})")
    shutil.copyfile(source[0], mine[0])
    committed = 0
    if cache.prefetch("r1", tokens):
        cache.wait_prefetch_io("r1")
        committed = drive(cache, ["r1"], trace=trace)["r1"]
    usable = keys.index(key) * page_size
    page = f"page {keys.index(key) + 1} of {PAGES}"
    assert committed <= usable, (f"S6: {page} was replaced by another model's page of the same name and length, yet {committed} tokens "
                                 f"were committed (at most {usable} are this model's); beside it, S7: its header names another namespace")
    try:
        assert_loaded_bytes(cache, cache.load_back(tokens), data, len(tokens))
    except AssertionError as exc:
        if not str(exc).startswith("S5:"):
            raise  # not the bytes (a window or a state missing): that clause broke, whatever page moved in
        raise AssertionError(f"S6: another model's {page}, moved into this one's storage, was served as its own "
                             f"(S7: its header names another namespace): {exc}") from None
    close_and_check_trace(cache, trace, config)
