"""vote_over_tp_group_only: unified_radix whose votes reduce over the tp group it was handed, never its attention groups.

Upstream's UnifiedRadixCache did this until 4df1ccdad (PR #27330). Where the
tp group spans every rank that holds a request, it changes nothing. With
DP attention and attention context parallelism, the scheduler hands the cache
its attention TP group as its tp group (one rank under DSA's context
parallelism): each rank's vote is its own, and the ranks of one
context-parallel pair, which hold shards of one request, finish it at
different steps.

Must be caught by: X1 (a decision that is not the combine of every rank's
vote), in the two-rank context-parallel layout
(conformance/suite/test_multirank.py, test_context_parallel_ranks_...).
"""

from __future__ import annotations

from caches.unified_radix import UnifiedRadixCache
from caches.variants._adapter import VariantAdapter, variant_of
from spec.groups import TP_RULE


class VoteOverTpGroupOnlyCache(UnifiedRadixCache):
    name = "vote_over_tp_group_only"
    vote_group_rule = TP_RULE  # the defect: the attention groups are never reduced over


def vote_over_tp_group_only() -> VariantAdapter:
    return variant_of("unified_radix", "vote_over_tp_group_only", VoteOverTpGroupOnlyCache)
