import pytest
import torch

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
    for name, pool in cache.pools.items():
        assert torch.equal(loaded.data[name], data[name]), name
    assert check(trace.trace(), None) == []
