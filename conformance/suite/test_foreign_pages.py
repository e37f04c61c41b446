"""Pages of another configuration: two caches whose KV format differs in one respect share one storage directory.

The production failure class itself: a server reads pages another server
of the same model stored for the same tokens in another format and serves
them as its own. Each case is one a deployment produces by one setting: a
KV cache dtype (also one of the writer's width: fp16 beside bf16), a host
memory layout (the same bytes per page in another order), a page size,
another model of the same format. The reader never stored
anything, so any token it serves from those pages is foreign (S6): a
correct reader finds a miss, whatever the writer left in storage.
"""

from __future__ import annotations

import pytest

from conformance.adapter import KV_FORMATS
from conformance.scenarios.workload import drive, request_data, request_tokens, store
from spec.config import TerminationConfig

PAGES = 4


# The writer's format where it is not the default: a same-width dtype is judged against the dtype it matches in width.
WRITER_FORMAT = {"dtype_same_width": "dtype"}


def _reader_env(differs: str, page_size: int) -> dict:
    if differs == "page_size":
        return {"termination": TerminationConfig(policy="wait_complete", page_size=2 * page_size)}
    return {"termination": TerminationConfig(policy="wait_complete", page_size=page_size), "kv_format": differs}


@pytest.mark.precondition("shared_storage_across_configs")
@pytest.mark.clause("S6")
@pytest.mark.parametrize("differs", [pytest.param("dtype", marks=pytest.mark.needs("kv_formats")),
                                     pytest.param("dtype_same_width", marks=pytest.mark.needs("kv_formats")),
                                     pytest.param("model", marks=pytest.mark.needs("model_names")),
                                     pytest.param("layout", marks=pytest.mark.needs("host_layouts")),
                                     pytest.param("page_size", marks=pytest.mark.needs("page_sizes"))])
def test_pages_of_another_configuration_are_misses(impl, make_cache, trace, tmp_path, differs, page_size):
    shared = tmp_path / "shared-storage"
    writer = make_cache(termination=TerminationConfig(policy="wait_complete", page_size=page_size), storage_dir=shared,
                        kv_format=WRITER_FORMAT.get(differs, "default"))
    tokens = request_tokens(61, PAGES * page_size)
    store(writer, tokens, request_data(writer, tokens, 61))
    writer.close()  # the writing server is gone; its pages stay in storage
    reader = make_cache(storage_dir=shared, **_reader_env(differs, page_size))
    formats = {name: (pool.dtype, pool.elem_shape) for name, pool in reader.pools.items()}
    served = 0
    if reader.prefetch("r1", tokens):
        reader.wait_prefetch_io("r1")
        drive(reader, ["r1"], max_steps=3, trace=trace)
        served = reader.load_back(tokens).tokens
    assert served == 0, (
        f"S6: a cache whose KV pages differ from the writer's only in {differs} "
        f"({KV_FORMATS.get(differs, 'twice the page size')}; {formats}) served {served} tokens from the "
        f"writer's pages in the shared storage: another configuration's bytes, read as its own")
