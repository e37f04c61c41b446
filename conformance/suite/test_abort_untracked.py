"""Ids this rank does not track: a scheduler step and an abort over requests whose prefetch ended, or never began.

SGLang's scheduler hands every rank the same ids in the same step: a
request whose prefetch this rank already committed may still be checked
(a peer tracks it) and aborted (the request ended). A check must join its
collectives neutrally and report no hit for it (X4); an abort must take
nothing from the tree and return normally (F8). Either raising stops the
scheduler, on this rank only.
"""

from __future__ import annotations

import pytest

from conformance.scenarios.races import close_and_check_trace, served, stored_request
from conformance.scenarios.workload import assert_whole_commit, check_untracked, drive
from spec.config import TerminationConfig

PAGES = 4
UNTRACKED = ["r1", "never-started"]  # r1's prefetch ended; never-started never began


@pytest.mark.clause("X4", "F8")
@pytest.mark.parametrize("policy", ["best_effort", "wait_complete", "timeout"])
def test_a_step_and_an_abort_over_ids_this_rank_no_longer_tracks(impl, make_cache, trace, policy, page_size):
    config = TerminationConfig(policy=policy, page_size=page_size)
    cache = make_cache(termination=config, batch_pages=2)
    tokens, data = stored_request(cache, seed=87, pages=PAGES, page_size=page_size)
    assert cache.prefetch("r1", tokens) == len(tokens)
    cache.wait_prefetch_io("r1")
    assert_whole_commit(drive(cache, ["r1"], trace=trace), "r1", len(tokens), "every page loaded")
    done = check_untracked(cache, UNTRACKED, "r1's prefetch ended, never-started never began")
    hits = {request_id: tokens for request_id, tokens in done.items() if tokens}  # ended with nothing committed is no hit
    assert not hits, f"F8: a check reported hits for prefetches this rank no longer tracks: {hits}"
    for request_id in UNTRACKED:
        try:
            cache.abort(request_id)
        except Exception as exc:
            raise AssertionError(f"F8: aborting {request_id}, whose prefetch {'ended' if request_id == 'r1' else 'never began'}, "
                                 f"raised {type(exc).__name__}: {exc}") from exc
    served(cache, tokens, data, len(tokens))  # an abort after the commit takes nothing from the tree
    close_and_check_trace(cache, trace, config)
