import pytest
import torch

from conformance.oracles.first_causes import said_with_causes
from conformance.oracles.outcome import assert_loaded_bytes
from conformance.scenarios.workload import assert_whole_commit, checked_progress
from spec import check


@pytest.mark.clause("S5", "L1", "F11", "F3", "F8")
def test_roundtrip_through_storage(make_cache, trace, page_size):
    cache = make_cache(policy="wait_complete")
    tokens = list(range(1, 4 * page_size + 1))  # four pages
    g = torch.Generator().manual_seed(0)
    data = {}
    for name, pool in cache.pools.items():
        rows = 1 if pool.unit == "state" else len(tokens)
        data[name] = torch.randn(rows, *pool.elem_shape, generator=g).to(pool.dtype)
    cache.write(tokens, data)
    cache.flush()
    cache.evict_all()
    matched = cache.match(tokens)
    assert matched == (0, 0), f"F8: evict_all() left {matched} tokens matched in the device and host tiers"
    requested = cache.prefetch("r1", tokens)
    assert requested == len(tokens), f"F8: a prefetch of {len(tokens)} stored tokens requested {requested}"
    cache.wait_prefetch_io("r1")
    assert_whole_commit(checked_progress(cache, ["r1"], trace), "r1", len(tokens), "the first check after the IO ended")
    loaded = cache.load_back(tokens)
    assert loaded.tokens == len(tokens), f"F8: {len(tokens)} tokens committed but a match now loads {loaded.tokens}"
    assert_loaded_bytes(cache, loaded, data, len(tokens))  # every pool; a window pool: the window before the end
    violations = check(trace.trace(), None)
    assert not violations, "spec violations:\n" + "\n".join(said_with_causes(violations[:12], trace.trace()))
