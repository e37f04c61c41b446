"""The fence: what may enter the tree once a prefetch is terminated.

The decision (spec/decision.py) answers "may we stop waiting?". The fence
answers the safety question separately and applies under every policy,
best_effort included: terminate stops IO that has not started, excludes IO
that has, and only then exposes slots to the tree.

Order of a commit, on every rank:
  1. under the operation's lock: mark it terminated (no IO starts after this)
     and snapshot its per-pool progress and in-flight IO (F1, F2);
  2. committable pages = min(KV pages, pages of every ALL_PAGES pool) (F3);
  3. one MIN collective agrees the committed pages across ranks (F3, S4), and
     for every trailing pool (a TRAILING_PAGES state, a TRAILING_WINDOW
     window) whether every rank loaded it for exactly that length (F4, F10):
     payload [pages, s, -s per trailing pool];
  4. insert the committed pages of KV and every ALL_PAGES pool; attach a
     TRAILING_PAGES state, or a TRAILING_WINDOW pool's whole window, only if
     every rank loaded it for that length (F4, F10);
  5. free every other slot whose IO is not in flight now; a slot with IO in
     flight is freed by whoever ends that IO, never before (F5, F9).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Iterable, Mapping, Sequence

from spec.errors import ConfigError
from spec.trace import LOAD, Event, EventKind

COMMIT_COLLECTIVE = "commit_min"
HIT_COLLECTIVE = "hit_min"


class HitPolicy(str, Enum):
    """How much of an extra pool a hit needs."""

    ALL_PAGES = "all_pages"  # every page of the hit must be present (e.g. an indexer)
    TRAILING_PAGES = "trailing_pages"  # only the state at the last page matters (e.g. mamba)
    # Only the pages within the window before the match end matter (sliding-window
    # attention): a match of p pages needs the last min(window pages, p) of them (F10).
    TRAILING_WINDOW = "trailing_window"


# Pools whose data belongs to one prefix length: attached for exactly that length, or dropped.
TRAILING_POLICIES = (HitPolicy.TRAILING_PAGES, HitPolicy.TRAILING_WINDOW)


def window_pages(window_tokens: int, page_size: int) -> int:
    """Pages a TRAILING_WINDOW pool keeps before a match end: the window rounded up to whole pages."""
    for name, value in (("window_tokens", window_tokens), ("page_size", page_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ConfigError(name, value, "an integer > 0")
    return -(-window_tokens // page_size)


@dataclass(frozen=True)
class PoolProgress:
    """One extra pool's progress at terminate.

    For ALL_PAGES pools, completed_pages counts leading pages loaded.
    For TRAILING_PAGES pools, completed_pages is the hit length (in pages)
    whose trailing state was loaded, or 0 when none was. For TRAILING_WINDOW
    pools, it is the hit length whose whole window (every page of it) was
    loaded, or 0 when any page of it was not.
    """

    name: str
    hit_policy: HitPolicy
    completed_pages: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "hit_policy", HitPolicy(self.hit_policy))
        if isinstance(self.completed_pages, bool) or not isinstance(self.completed_pages, int) or self.completed_pages < 0:
            raise ConfigError(f"{self.name}.completed_pages", self.completed_pages, "an integer >= 0")


def committable_pages(kv_completed_pages: int, pools: Iterable[PoolProgress] = ()) -> int:
    """F3: the longest prefix whose KV and every ALL_PAGES pool are loaded on this rank."""
    if isinstance(kv_completed_pages, bool) or not isinstance(kv_completed_pages, int) or kv_completed_pages < 0:
        raise ConfigError("kv_completed_pages", kv_completed_pages, "an integer >= 0")
    pages = kv_completed_pages
    for pool in pools:
        if pool.hit_policy is HitPolicy.ALL_PAGES:
            pages = min(pages, pool.completed_pages)
    return pages


def agreed_pages(per_rank: Sequence[int]) -> int:
    """F3/S4: every rank commits the MIN of the ranks' committable pages."""
    if not per_rank:
        raise ConfigError("per_rank", list(per_rank), "one committable page count per rank, at least one")
    return min(per_rank)


def trailing_attached(pool: PoolProgress, committed_pages: int) -> bool:
    """F4, F10: a trailing state, or a window, is attached only if it belongs to exactly the committed length."""
    if pool.hit_policy not in TRAILING_POLICIES:
        raise ConfigError("hit_policy", pool.hit_policy.value, " or ".join(p.value for p in TRAILING_POLICIES))
    return committed_pages > 0 and pool.completed_pages == committed_pages


# A rank that no longer tracks an operation joins the commit collective with 0:
# nobody commits data that one rank cannot vouch for (X4, S4).
UNTRACKED_COMMIT_PAGES = 0


def commit_payload(local_pages: int, trailing_pages: Sequence[int] = ()) -> list[int]:
    """What each rank contributes to the one MIN all-reduce of a commit.

    trailing_pages: per trailing pool (TRAILING_PAGES and TRAILING_WINDOW, in
    a fixed order every rank shares), the length its state or whole window
    was loaded for (0: none). Carrying s and -s
    gives MIN and MAX in one MIN reduce.
    """
    payload = [int(local_pages)]
    for pages in trailing_pages:
        payload += [int(pages), -int(pages)]
    return payload


def untracked_commit_payload(trailing_pools: int) -> list[int]:
    return commit_payload(UNTRACKED_COMMIT_PAGES, [0] * trailing_pools)


@dataclass(frozen=True)
class CommitDecision:
    pages: int
    trailing_attached: tuple[bool, ...]


def read_commit(reduced: Sequence[int]) -> CommitDecision:
    """F3 + F4 + F10 across ranks: the committed pages, and per trailing pool whether to attach.

    A state or a window is attached only when every rank loaded it for
    exactly the committed length: otherwise ranks would serve different
    prefixes.
    """
    if not reduced or (len(reduced) - 1) % 2:
        raise ConfigError("reduced", list(reduced), "[pages] followed by a (min, -max) pair per trailing pool")
    pages = reduced[0]
    attached = []
    for index in range(1, len(reduced), 2):
        lowest, highest = reduced[index], -reduced[index + 1]
        attached.append(pages > 0 and lowest == highest == pages)
    return CommitDecision(pages, tuple(attached))


@dataclass(frozen=True)
class SlotDisposition:
    """Where each allocated slot of one pool goes at commit."""

    insert: tuple[int, ...]
    free_now: tuple[int, ...]
    free_when_io_ends: tuple[int, ...]


def dispose_slots(
    slots_by_page: Sequence[Sequence[int]],
    inserted_pages: int,
    in_flight: Iterable[int],
) -> SlotDisposition:
    """F5: split one pool's slots into inserted, freed now, and freed after their IO ends.

    slots_by_page lists the pool's slots page by page, in hit order. Pages
    beyond inserted_pages are freed, except slots with IO in flight, which
    are freed only once that IO ends. An inserted slot with IO in flight is a
    contract breach (F3 counts only finished pages) and raises.
    """
    busy = set(in_flight)
    insert: list[int] = []
    now: list[int] = []
    later: list[int] = []
    for index, page in enumerate(slots_by_page):
        for slot in page:
            if index < inserted_pages:
                if slot in busy:
                    raise ConfigError("inserted slot", slot, "a slot with no IO in flight (F3 counts only finished pages)")
                insert.append(slot)
            elif slot in busy:
                later.append(slot)
            else:
                now.append(slot)
    return SlotDisposition(tuple(insert), tuple(now), tuple(later))


# --- the fence as an oracle over one rank's trace ----------------------------------------


def committable_at_terminate(events: Sequence[Event], op: str, pools: Mapping[str, HitPolicy | str], page_size: int) -> int | None:
    """F2 + F3 from the trace alone: the pages `op` could commit on this rank when it was terminated.

    For KV and every ALL_PAGES pool (`pools`: name -> hit policy; "kv" is
    KV): the leading pages, in the order the operation allocated their slots
    (a pool that allocates none rides KV's slots, in KV's order),
    whose every slot a load of `op` had filled (IO_END ok) before its
    TERMINATE; IO still running then counts for nothing (F5). KV is clamped
    to the last hit length (HIT) before the terminate. A revoked operation,
    and one terminated outside a scheduler check (an abort, step None: it
    joins the commit with nothing, X4), can commit 0. None when `op` was
    never terminated or revoked. An operation committed in a scheduler step
    without a terminate (the ACK drain commits a completed prefetch so) is
    cut at that COMMIT: what had loaded by then. Trailing pools (states,
    windows) do not bound the pages: they are attached or not (F4, F10;
    window_attachable_at_terminate).
    """
    loads: set[int] = set()
    allocated: dict[str, list[int]] = {}
    loaded: dict[str, set[int]] = {}
    hit = 0
    for e in events:
        if e.op != op:
            continue
        if e.kind is EventKind.REVOKE:
            return 0
        if e.kind is EventKind.TERMINATE or (e.kind is EventKind.COMMIT and e.step is not None):
            if e.step is None:
                return UNTRACKED_COMMIT_PAGES
            pages = min(_leading_pages(allocated.get("kv", []), loaded.get("kv", set()), page_size), hit)
            # An ALL_PAGES pool with no slots of its own rides KV's host slots (upstream's indices_from_pool=KV).
            extras = [
                PoolProgress(pool, HitPolicy.ALL_PAGES, _leading_pages(allocated.get(pool, allocated.get("kv", [])), loaded.get(pool, set()), page_size))
                for pool, policy in pools.items()
                if pool != "kv" and HitPolicy(policy) is HitPolicy.ALL_PAGES
            ]
            return committable_pages(pages, extras)
        if e.kind is EventKind.ALLOC and e.pool is not None:
            allocated.setdefault(e.pool, []).extend(e.slots)
        elif e.kind is EventKind.IO_START and e.value == LOAD:
            loads.add(e.io)
        elif e.kind is EventKind.IO_END and e.value and e.io in loads:
            loaded.setdefault(e.pool, set()).update(e.slots)
        elif e.kind is EventKind.HIT:
            hit = int(e.value)
    return None


def _leading_pages(slots: Sequence[int], loaded: set[int], page_size: int) -> int:
    pages = 0
    for first in range(0, len(slots) - page_size + 1, page_size):
        if not all(s in loaded for s in slots[first : first + page_size]):
            break
        pages += 1
    return pages


def window_attachable_at_terminate(events: Sequence[Event], op: str, pool: str) -> int | None:
    """F10 from the trace alone: the hit length (pages) for which `op` had loaded `pool`'s whole window when terminated.

    The window is the pool's one load of `op` (its IO_START); it was loaded
    for the hit length in effect when that load began (the last HIT before
    it), and counts only if every slot of it ended loaded (IO_END ok) before
    the TERMINATE. 0 when it was not (or never started, or `op` was revoked
    or aborted); None when `op` was never terminated or revoked. On every
    rank the commit may attach the window only when each rank's value here
    equals the committed pages.
    """
    hit = 0
    loaded_for = 0
    window_io: int | None = None
    wanted: set[int] = set()
    done: set[int] = set()
    for e in events:
        if e.op != op:
            continue
        if e.kind is EventKind.REVOKE:
            return 0
        if e.kind is EventKind.TERMINATE:
            if e.step is None or window_io is None:
                return 0
            return loaded_for if wanted and wanted <= done else 0
        if e.kind is EventKind.HIT:
            hit = int(e.value)
        elif e.kind is EventKind.IO_START and e.value == LOAD and e.pool == pool and window_io is None:
            window_io, loaded_for, wanted = e.io, hit, set(e.slots)
        elif e.kind is EventKind.IO_END and e.io == window_io and e.value:
            done.update(e.slots)
    return None
