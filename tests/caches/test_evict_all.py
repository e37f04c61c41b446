"""evict_all(): one call empties the device and host tiers under every write policy; storage keeps its pages."""

from __future__ import annotations

import pytest

from caches.adapters import CacheSession
from caches.config import WRITE_POLICIES
from conformance.oracles.outcome import assert_loaded_bytes
from conformance.scenarios.workload import drive

# Every cache, with each kind of extra pool it takes (a window pool included).
CONFIGS = {
    "hiradix": ("hiradix", ("indexer",)),
    "unified_radix": ("unified_radix", ("indexer", "mamba")),
    "unified_radix_indexer_swa": ("unified_radix", ("indexer", "swa")),
    "hi_mamba_radix": ("hi_mamba_radix", ("mamba",)),
}


@pytest.mark.parametrize("write_policy", WRITE_POLICIES)
@pytest.mark.parametrize("config", list(CONFIGS))
def test_one_evict_all_empties_device_and_host_and_storage_keeps_the_pages(cache_factory, oracle, config, write_policy):
    name, pools = CONFIGS[config]
    cache = cache_factory.build(name, extra_pools=pools, write_policy=write_policy, swa_window_tokens=8, swa_elem_shape=(3,))
    shared = oracle.request(1, 2)
    requests = [shared + oracle.request(2, 1), shared + oracle.request(3, 2)]  # an inner node and two leaves
    writes = {tuple(tokens): oracle.data(cache, tokens) for tokens in requests}
    for tokens in requests:
        cache.write(tokens, writes[tuple(tokens)])
    for _ in range(2):  # write_through_selective backs a node up at its second hit
        for tokens in requests:
            cache.match_prefix(tokens)

    cache.evict_all()

    assert cache.tree.node_count() == 0, f"{write_policy}: one evict_all() left {cache.tree.node_count()} nodes ({cache.tree.host_tokens()} host tokens)"
    held = {group: allocated for group, (allocated, _, _) in cache.slot_accounting().items() if allocated}
    assert held == {}, f"{write_policy}: one evict_all() left slots allocated: {held}"
    session = CacheSession(cache)
    assert [session.match(tokens) for tokens in requests] == [(0, 0)] * len(requests), "an emptied cache still serves a match"
    for index, tokens in enumerate(requests):
        cache.evict_all()  # each request comes back from storage alone, not after the shared prefix
        request_id = f"r{index}"
        assert session.prefetch(request_id, tokens) == len(tokens), "storage lost pages evict_all() must keep"
        session.wait_prefetch_io(request_id)
        assert drive(session, [request_id]) == {request_id: len(tokens)}
        assert_loaded_bytes(session, session.load_back(tokens), writes[tuple(tokens)], len(tokens))
