"""The protocol's vocabulary: which methods of an implementation are protocol code, and what each part must keep.

Discovery (conformance/mutants/discovery.py) mutates a function only when
its name is listed here (or the adapter declares it in `mutation_targets`).
Names are upstream SGLang's and this project's; a bare name matches a
method or function of that name in any discovered module, "Class.name"
only that class's (for names too common to mean the protocol alone, such
as `insert` or `close`).

Each role carries the clauses a change to it breaks unless the operator
says more precisely (conformance/mutants/expectations.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Role:
    name: str
    what: str
    clauses: tuple[str, ...]  # what a change here breaks, when the operator does not say more
    names: tuple[str, ...]


@dataclass(frozen=True)
class Target:
    """One function to mutate (discovery finds them, the catalogue mutates them): here, apart from both, so neither imports the other."""

    module: str
    file: str
    qualname: str
    role: Role


ROLES = (
    Role("decision", "the local vote (can_terminate_prefetch)", ("D4",),
         ("can_terminate_prefetch", "_can_terminate_prefetch")),
    Role("timeout", "the timeout check and its budget", ("T1",),
         ("_prefetch_budget_s", "is_prefetch_timeout", "_is_prefetch_timeout", "_prefetch_timeout_check")),
    Role("combine", "the cross-rank reducer", ("X1",),
         ("all_reduce_max", "all_reduce_min", "_reduce", "_all_reduce_attn_groups")),
    Role("untracked", "the scheduler step over the agreed ids: a request a rank no longer tracks joins its collectives neutrally", ("X4",),
         ("join_untracked", "check_prefetch_progress", "SchedulerStep.check")),
    Role("snapshot", "the progress snapshot the vote and the commit read", ("F2",),
         ("progress", "_progress")),
    Role("hit_trim", "trimming the expected hit after a failed batch: the snapshot reads it", ("F2",),
         ("trim_hit",)),
    Role("terminate", "marking an operation terminated", ("F2",),
         ("terminate", "mark_terminate", "is_terminated")),
    Role("publish", "publishing KV progress", ("F1",),
         ("increment",)),
    Role("revoke", "revoking an operation", ("F7",),
         ("revoke",)),
    Role("io_start", "beginning IO (the re-check before each batch and the extra-pool transfer)", ("F1", "S2"),
         ("begin_io", "set_hit")),
    Role("io_thread", "the IO thread's loop: KV batches, then the extra-pool transfer", ("F1", "S2"),
         ("_load", "_load_extras", "_get", "load_thread_func_layer_by_layer", "prefetch_io_aux_func")),
    Role("hit_query", "the storage hit query, clamped to every pool and agreed across ranks", ("F3",),
         ("_hit_query", "_count_hit", "_trailing_hit", "_trailing_stored")),
    Role("io_end", "ending IO (slots under IO at terminate are freed by whoever ends it)", ("F5",),
         ("end_io", "fail_in_flight", "finish_transfers")),
    Role("expiry", "the bound on every transfer", ("L4",),
         ("expire_io", "expire")),
    Role("commit", "the commit through the fence", ("F3",),
         ("commit", "PrefetchCommit.insert", "insert_host")),
    Role("attach", "what the commit attaches (trailing states, windows) and hands to the tree", ("F4", "F10", "S1"),
         ("attach_state", "attach_window", "take_for_insert")),
    Role("release", "releasing an operation's slots", ("S3",),
         ("release", "_release", "release_idle", "_release_idle", "PrefetchOperation.drain")),
    Role("ending", "ending an operation: every slot returned, IO first", ("F8", "F5"),
         ("finish", "abort", "abort_all", "drain_finished", "drain_after_close", "HierarchicalCache.close")),
    Role("copy_free", "frees that must wait for a pending copy", ("F9",),
         ("CopyTracker.free", "CopyTracker.poll", "CopyTracker._finish", "_run_deferred", "busy", "WritePath.insert",
          "_host_copy_pending")),
    # A pin ignored exposes a slot still under IO (S1) or frees one a copy or backup still reads (S3);
    # freed under a backup still queued (no IO begun yet), the slot takes another prefix's bytes, which the
    # backup then stores under the pinned prefix's key: only loading it back shows it (S5).
    Role("eviction", "eviction and the pins that keep nodes", ("S1", "S3", "S5"),
         ("evict", "evict_host", "evict_path", "drop_device", "drop_host", "_device_evictable", "_host_evictable",
          "make_room", "RadixTree.lock", "RadixTree.unlock", "pin_host", "unpin_host", "device_evictable", "host_evictable",
          "pin_prefetch_anchor", "unpin_prefetch_anchor", "evict_host_states")),
    # A load-back copies a match's host pages and states to the device; a copy that failed leaves garbage nothing may
    # serve. Making room for them (all or nothing) is the cache's own contract: a change there loads nothing or raises.
    Role("load_back", "load-back: a match's states copied to the device, and a failed copy's path taken off it", ("S5", "F9", "S1"),
         ("_load_back_states", "LoadBackPath._done")),
    Role("integrity", "checking stored pages (checksum, header)", ("S7",),
         ("_read_verified", "_verify", "_check_read", "_read_page", "bound_checksum", "checksum")),
    Role("namespace", "the storage namespace (which stored bytes a cache may read)", ("S6",),
         ("StorageNamespace.describe", "StorageNamespace.of", "namespace_tag")),
)

ROLE_NAMED = {role.name: role for role in ROLES}
DECLARED = Role("declared", "declared by the adapter's mutation_targets, outside this vocabulary", (), ())

_BY_QUALIFIED = {name: role for role in ROLES for name in role.names if "." in name}
_BY_FUNCTION = {name: role for role in ROLES for name in role.names if "." not in name}


def role_of(qualname: str) -> Role | None:
    """The role of a function by its qualified name ('Class.method' or 'function'), None outside the vocabulary."""
    parts = qualname.split(".")
    if len(parts) >= 2 and ".".join(parts[-2:]) in _BY_QUALIFIED:
        return _BY_QUALIFIED[".".join(parts[-2:])]
    return _BY_FUNCTION.get(parts[-1])
