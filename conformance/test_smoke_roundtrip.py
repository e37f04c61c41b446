import pytest
import torch

from conformance.scenarios import assert_loaded_bytes
from spec import check


@pytest.mark.clause("S5")
def test_roundtrip_through_storage(make_cache, trace):
    cache = make_cache(policy="wait_complete")
    tokens = list(range(1, 17))
    g = torch.Generator().manual_seed(0)
    data = {}
    for name, pool in cache.pools.items():
        rows = 1 if pool.unit == "state" else len(tokens)
        data[name] = torch.randn(rows, *pool.elem_shape, generator=g).to(pool.dtype)
    cache.write(tokens, data)
    cache.flush()
    cache.evict_all()
    assert cache.match(tokens) == (0, 0)
    assert cache.prefetch("r1", tokens) == 16
    cache.wait_prefetch_io("r1")
    assert cache.check_progress(["r1"]) == {"r1": 16}
    loaded = cache.load_back(tokens)
    assert loaded.tokens == 16
    assert_loaded_bytes(cache, loaded, data, len(tokens))  # every pool; a window pool: the window before the end
    assert check(trace.trace(), None) == []
