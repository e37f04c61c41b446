"""The explorer's reports between ranks go through a store, never a collective: every rank gets every report; a failed peer stops the wait."""

from __future__ import annotations

import threading

import pytest

from conformance.multirank.explore.schedule import PeerFailed, StoreSync
from conformance.multirank.processes import host_store


@pytest.fixture
def store():
    return host_store(10.0)


def test_every_rank_gets_every_ranks_report_in_rank_order(store):
    syncs = [StoreSync(store, rank, 2, 10.0, "t") for rank in range(2)]
    got: dict[int, list] = {}
    threads = [threading.Thread(target=lambda r=r: got.__setitem__(r, syncs[r].share("v0", {"rank": r}))) for r in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10.0)
    assert got == {0: [{"rank": 0}, {"rank": 1}], 1: [{"rank": 0}, {"rank": 1}]}


def test_a_peer_that_failed_ends_the_wait_for_its_report_naming_it(store):
    waiting, failing = StoreSync(store, 0, 2, 10.0, "t"), StoreSync(store, 1, 2, 10.0, "t")
    failing.failed()
    with pytest.raises(PeerFailed, match="rank 1's schedule failed while rank 0 waited for v3"):
        waiting.share("v3", "mine")


def test_what_rank_0_posts_is_read_by_run(store):
    poster, reader = StoreSync(store, 0, 2, 10.0, "t"), StoreSync(store, 1, 2, 10.0, "t")
    poster.post("task", "first")
    poster.run = 1
    poster.post("task", "second")
    assert reader.fetch("task") == "first"
    reader.run = 1
    assert reader.fetch("task") == "second"
