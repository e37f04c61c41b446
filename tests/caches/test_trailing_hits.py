"""A prefetch shrunk to fit the host commits only what a match can serve (unified_radix, hi_mamba_radix).

A mamba state exists only at the ends of stored prefixes. A prefetch shrunk to
fit a small host tier ends where no state was stored: the storage hit query
trims the hit to the deepest page that has one, so the commit, the storage-hit
statistics and the host slots held all match what `match_prefix` then serves.
"""

from __future__ import annotations

import pytest

STATE_CACHES = ("unified_radix", "hi_mamba_radix")


def run_prefetch(cache, tokens, request_id="r1") -> tuple[int, int]:
    requested = cache.prefetch_from_storage(request_id, tokens)
    assert requested > 0
    cache.wait_prefetch_io(request_id)
    done = cache.check_prefetch_progress([request_id])
    assert request_id in done, "wait_complete: IO ended, yet the check did not finish the prefetch"
    cache.check_prefetch_progress([])
    return requested, done[request_id]


def write_to_storage(cache, oracle, tokens) -> None:
    cache.write(tokens, oracle.data(cache, tokens))
    cache.flush()


@pytest.mark.parametrize("name", STATE_CACHES)
def test_a_shrunk_prefetch_without_a_state_at_its_end_commits_nothing(cache_factory, oracle, name):
    writer = cache_factory.build(name)
    tokens = oracle.request(21, 4)  # one node: a state after page 4 only
    write_to_storage(writer, oracle, tokens)
    reader = cache_factory.build(name, host_pages=3)
    requested, committed = run_prefetch(reader, tokens)
    assert requested == 3 * reader.page_size, "the prefetch shrinks to the 3 pages that fit"
    served = reader.match_prefix(tokens).matched_tokens
    assert committed == served == 0, f"committed {committed} tokens, match serves {served}: no state at page 3"
    assert reader.stats.storage_hit_tokens == 0
    assert reader.tree.host_tokens() == 0, "host slots hold pages nothing can serve"
    oracle.assert_exact(reader)


@pytest.mark.parametrize("name", STATE_CACHES)
def test_a_shrunk_prefetch_is_trimmed_to_the_deepest_stored_state(cache_factory, oracle, name):
    writer = cache_factory.build(name)
    tokens = oracle.request(22, 4)
    write_to_storage(writer, oracle, tokens[: 2 * writer.page_size])  # a state after page 2
    write_to_storage(writer, oracle, tokens)  # and after page 4
    reader = cache_factory.build(name, host_pages=3)
    requested, committed = run_prefetch(reader, tokens)
    assert requested == 3 * reader.page_size
    assert committed == 2 * reader.page_size, f"committed {committed}: the deepest state within the 3 pages is after page 2"
    m = reader.match_prefix(tokens)
    assert m.matched_tokens == committed and reader.stats.storage_hit_tokens == committed
    assert reader.load_back(m.host_node) is not None
    m = reader.match_prefix(tokens)
    got = reader.read_device(m.device_slots, state_node=m.device_node)
    want = oracle.data(reader, tokens[:committed])
    for pool, tensor in want.items():
        assert oracle.same_bytes(got[pool], tensor), f"pool {pool}: loaded bytes differ from the written ones"
    oracle.assert_exact(reader)


@pytest.mark.parametrize("name", STATE_CACHES)
def test_a_full_prefetch_still_commits_the_whole_hit(cache_factory, oracle, name):
    writer = cache_factory.build(name)
    tokens = oracle.request(23, 4)
    write_to_storage(writer, oracle, tokens)
    reader = cache_factory.build(name)
    _, committed = run_prefetch(reader, tokens)
    assert committed == reader.match_prefix(tokens).matched_tokens == len(tokens)
