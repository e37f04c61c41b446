import pytest

from conformance.scenarios import pool_data, same_bytes
from spec import check


@pytest.mark.clause("S5")
def test_roundtrip_through_storage(make_cache, trace):
    cache = make_cache(policy="wait_complete")
    tokens = list(range(1, 17))
    data = pool_data(cache.pools.values(), len(tokens), 0)
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
        assert same_bytes(loaded.data[name], data[name]), name
    assert check(trace.trace(), None) == []
