"""Known-bad variants of the built-in caches (hiradix, and unified_radix with a sliding window): they prove the conformance harness has teeth.

Each one breaks the protocol in one way that upstream broke it (or could),
and its module docstring names the clauses that must catch it. Run one with

    python -m pytest conformance --cache-impl caches.variants:guard_missing

tests/harness/test_teeth.py checks that every variant fails the suite
naming those clauses, while the real hiradix passes the same selection.
They are never registered as entry points.
"""

from caches.variants.abort_path_tells_cache_nothing import abort_path_tells_cache_nothing
from caches.variants.anchor_pin_released_early import anchor_pin_released_early
from caches.variants.close_returns_quietly import close_returns_quietly
from caches.variants.degraded_key_kept import degraded_key_kept
from caches.variants.drain_skipped_when_idle import drain_skipped_when_idle
from caches.variants.extra_vote_on_one_group import extra_vote_on_one_group
from caches.variants.free_ignores_load_backs import free_ignores_load_backs
from caches.variants.guard_after_reduce import guard_after_reduce
from caches.variants.guard_missing import guard_missing
from caches.variants.guard_on_vote import guard_on_vote
from caches.variants.namespace_dtype_by_width import namespace_dtype_by_width
from caches.variants.namespace_ignores_layout import namespace_ignores_layout
from caches.variants.namespace_ignores_world_size import namespace_ignores_world_size
from caches.variants.payload_drops_terminated import payload_drops_terminated
from caches.variants.sidecar_hit_unreduced import sidecar_hit_unreduced
from caches.variants.state_attached_locally import state_attached_locally
from caches.variants.state_slot_of_the_path import state_slot_of_the_path
from caches.variants.snapshot_before_mark import snapshot_before_mark
from caches.variants.split_head_unbacked import split_head_unbacked
from caches.variants.upstream_shapes import upstream_pre_fix, upstream_vote_forcing
from caches.variants.upstream_windows import upstream_windows
from caches.variants.vote_over_attn_tp_only import vote_over_attn_tp_only
from caches.variants.vote_over_tp_group_only import vote_over_tp_group_only
from caches.variants.vote_reads_live_progress import vote_reads_live_progress
from caches.variants.window_agreed_locally import window_agreed_locally
from caches.variants.window_counts_leading_pages import window_counts_leading_pages
from caches.variants.window_unchecked import window_unchecked

# variant factory name -> clauses the conformance suite must report as failed
EXPECTED_FAILURES = {
    "guard_missing": ("D3",),
    "guard_on_vote": ("D5",),
    "guard_after_reduce": ("X3",),
    "upstream_windows": ("S1", "F3", "F7"),
    "upstream_pre_fix": ("D3",),
    "upstream_vote_forcing": ("D5", "L2"),
    "payload_drops_terminated": ("X1",),
    "window_unchecked": ("F10",),
    "window_agreed_locally": ("F10",),
    "extra_vote_on_one_group": ("L3",),
    "namespace_ignores_layout": ("S6",),
    "degraded_key_kept": ("S8",),
    "split_head_unbacked": ("L6",),
    "drain_skipped_when_idle": ("L3",),
    "state_attached_locally": ("F4",),
    "sidecar_hit_unreduced": ("S4", "F3"),
    "vote_over_attn_tp_only": ("X1",),
    "vote_over_tp_group_only": ("X1",),
    "vote_reads_live_progress": ("F2",),
    "snapshot_before_mark": ("F2", "F11"),
    "namespace_dtype_by_width": ("S6",),
    "free_ignores_load_backs": ("F9", "S3"),
    "anchor_pin_released_early": ("F8",),
    "window_counts_leading_pages": ("F10",),
    "close_returns_quietly": ("F5",),
    "namespace_ignores_world_size": ("S6",),
    "state_slot_of_the_path": ("S5",),
    "abort_path_tells_cache_nothing": ("S2",),
}

# Variants the suite must reject naming their clauses and no other (no other clause "failed here").
ONLY_THESE = frozenset({"upstream_pre_fix", "upstream_vote_forcing", "window_unchecked", "namespace_ignores_layout", "namespace_dtype_by_width"})

__all__ = ["guard_missing", "guard_on_vote", "guard_after_reduce", "upstream_windows", "upstream_pre_fix",
           "upstream_vote_forcing", "payload_drops_terminated", "window_unchecked", "window_agreed_locally", "extra_vote_on_one_group",
           "namespace_ignores_layout", "namespace_ignores_world_size", "vote_reads_live_progress", "snapshot_before_mark", "namespace_dtype_by_width",
           "free_ignores_load_backs", "anchor_pin_released_early", "close_returns_quietly",
           "window_counts_leading_pages", "degraded_key_kept", "split_head_unbacked", "drain_skipped_when_idle", "state_attached_locally",
           "sidecar_hit_unreduced", "vote_over_attn_tp_only", "vote_over_tp_group_only", "state_slot_of_the_path", "abort_path_tells_cache_nothing", "EXPECTED_FAILURES", "ONLY_THESE"]
