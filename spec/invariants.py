"""Invariants as predicates over recorded traces.

Each checker takes every rank's trace and yields Violations that name the
clause, the event and the slot. `check` runs the requested checkers; a test
asserts the result is empty, or, for a known-bad implementation, that it names
the expected clause.

Slot identity is (rank, pool, space, slot). Op-owned slots follow a lifecycle
free -> op -> (tree | free); slots never seen in an ALLOC are not tracked.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Iterator, Mapping

from spec.config import TerminationConfig
from spec.decision import VOTE_COLLECTIVE
from spec.divergences import suffix
from spec.errors import ConfigError
from spec.profiles import Profile, profile as find_profile
from spec.fence_lock import UnfencedSection
from spec.trace import HOST, LOAD, LOAD_BACK_COPY, Event, EventKind, Trace
from spec.trace_checks import Checker, CheckContext, SlotKey, Violation, io_closed, op_ended, slot_keys, terminates_by_step
from spec.liveness_checks import check_l1, check_l2, check_l3, check_l4


# --- safety ------------------------------------------------------------------

def check_s1(ctx: CheckContext) -> Iterator[Violation]:
    """S1: no insert or load-back of a slot with IO in flight or still able to start."""
    for trace in ctx.traces.values():
        open_io: dict[SlotKey, set[int]] = defaultdict(set)
        owner: dict[SlotKey, str] = {}
        stopped: set[str] = set()
        for e in trace.events:
            if e.kind is EventKind.IO_START:
                if e.value == LOAD_BACK_COPY and e.space == HOST:
                    # The copy to the device is the load-back: its source must be quiet.
                    yield from _exposed(e, "loaded back", open_io, owner, stopped)
                for key, _ in slot_keys(e):
                    open_io[key].add(e.io)
            elif e.kind is EventKind.IO_END:
                for key, _ in slot_keys(e):
                    open_io[key].discard(e.io)
            elif e.kind is EventKind.ALLOC and e.op is not None:
                for key, _ in slot_keys(e):
                    owner[key] = e.op
            elif io_closed(e.kind):
                stopped.add(e.op)
            elif e.kind is EventKind.INSERT:
                yield from _exposed(e, "inserted", open_io, owner, stopped)
                for key, _ in slot_keys(e):
                    owner.pop(key, None)


def _exposed(e: Event, action: str, open_io: Mapping, owner: Mapping, stopped: set) -> Iterator[Violation]:
    for slot in e.slots:
        key = (e.pool, e.space or HOST, slot)
        others = sorted(i for i in open_io.get(key, ()) if i != e.io)
        if others:
            ios = ",".join(str(i) for i in others)
            yield Violation("S1", f"{action} while IO {ios} into it is in flight", e, slot)
        op = owner.get(key)
        if op is not None and op not in stopped:
            yield Violation("S1", f"{action} before operation {op} was terminated or done (its IO may still start)", e, slot)


def check_s2(ctx: CheckContext) -> Iterator[Violation]:
    """S2: no IO of an operation starts after it was terminated or revoked, refused or not."""
    for trace in ctx.traces.values():
        stopped: dict[str, Event] = {}
        refused: dict[int, Event] = {}
        for e in trace.events:
            if op_ended(e.kind) and e.op not in stopped:
                stopped[e.op] = e
            elif e.kind is EventKind.IO_START and e.op in stopped:
                yield Violation("S2", f"IO started after #{stopped[e.op].seq} {stopped[e.op].kind.value} of {e.op}", e)
            elif e.kind is EventKind.IO_REFUSED and e.op in stopped:
                refused[e.io] = e
            elif e.kind in (EventKind.IO_LANDED, EventKind.IO_END) and e.io in refused:
                # The IO thread went on with a start its re-check refused: bytes moved after the terminate.
                first = refused.pop(e.io)
                yield Violation("S2", f"IO {e.io} ran although its start was refused at #{first.seq} (after #{stopped[e.op].seq} {stopped[e.op].kind.value} of {e.op})", e)


def check_s3(ctx: CheckContext) -> Iterator[Violation]:
    """S3: each op slot ends exactly once, in the tree or freed; never freed with IO in flight."""
    for trace in ctx.traces.values():
        open_io: dict[SlotKey, set[int]] = defaultdict(set)
        state: dict[SlotKey, str | None] = {}  # None free, "tree", or the owning op
        allocated_at: dict[SlotKey, Event] = {}
        for e in trace.events:
            if e.kind is EventKind.IO_START:
                for key, _ in slot_keys(e):
                    open_io[key].add(e.io)
            elif e.kind is EventKind.IO_END:
                for key, _ in slot_keys(e):
                    open_io[key].discard(e.io)
            elif e.kind is EventKind.ALLOC:
                for key, slot in slot_keys(e):
                    if state.get(key) is not None:
                        yield Violation("S3", f"allocated while still held by {_holder(state[key])}", e, slot)
                    state[key] = e.op if e.op is not None else "tree"
                    allocated_at[key] = e
            elif e.kind is EventKind.INSERT:
                for key, slot in slot_keys(e):
                    if key not in state:
                        continue
                    if state[key] != e.op:
                        yield Violation("S3", f"inserted by {e.op} but held by {_holder(state[key])}", e, slot)
                    state[key] = "tree"
            elif e.kind is EventKind.FREE:
                for key, slot in slot_keys(e):
                    if open_io[key]:
                        ios = ",".join(str(i) for i in sorted(open_io[key]))
                        yield Violation("S3", f"freed while IO {ios} into or out of it is in flight", e, slot)
                    if key not in state:
                        continue
                    expected = e.op if e.op is not None else "tree"
                    if state[key] != expected:
                        yield Violation("S3", f"freed as {_holder(expected)} but held by {_holder(state[key])}", e, slot)
                    state[key] = None
        if ctx.closed:
            for key, holder in state.items():
                if holder is not None and holder != "tree":
                    yield Violation("S3", f"never inserted nor freed by {holder} (leaked)", allocated_at[key], key[2])


def _holder(holder: str | None) -> str:
    if holder is None:
        return "nobody (already free)"
    return "the tree" if holder == "tree" else f"operation {holder}"


def check_s4(ctx: CheckContext) -> Iterator[Violation]:
    """S4: every rank commits the same length for an operation (a revoke commits 0)."""
    commits: dict[str, dict[int, tuple[int, Event]]] = defaultdict(dict)
    for rank, trace in ctx.traces.items():
        for e in trace.events:
            if e.kind is EventKind.COMMIT:
                commits[e.op][rank] = (int(e.value), e)
            elif e.kind is EventKind.REVOKE and rank not in commits[e.op]:
                commits[e.op][rank] = (0, e)
    for op, by_rank in commits.items():
        lengths = {length for length, _ in by_rank.values()}
        if len(lengths) > 1:
            detail = ", ".join(f"rank {r}: {by_rank[r][0]}" for r in sorted(by_rank))
            rank = max(by_rank, key=lambda r: by_rank[r][0])
            yield Violation("S4", f"ranks committed different lengths for {op} ({detail})", by_rank[rank][1])
        elif ctx.closed and len(by_rank) < len(ctx.traces):
            missing = sorted(set(ctx.traces) - set(by_rank))
            first = next(iter(by_rank.values()))[1]
            yield Violation("S4", f"{op} was committed on some ranks but never on ranks {missing}", first)


def check_s5(ctx: CheckContext) -> Iterator[Violation]:
    """S5: loaded-back bytes equal the stored bytes, page by page, in every pool; a load's page keys fill exactly their slots."""
    for trace in ctx.traces.values():
        stored: dict[str, str] = {}
        shapes: dict[str, tuple[int, set]] = {}  # op -> (page_size, state pools) from its OP_START
        for e in trace.events:
            if e.kind is EventKind.OP_START and isinstance(e.value, dict) and isinstance(e.value.get("page_size"), int):
                shapes[e.op] = (e.value["page_size"], set(e.value.get("state_pools", ())))
            elif e.kind is EventKind.IO_START and e.value == LOAD and e.keys and e.op in shapes:
                yield from _load_shape(e, *shapes[e.op])
            elif e.kind is EventKind.COMMIT and e.slots and e.op in shapes:
                yield from _commit_shape(e, shapes[e.op][0])
            elif e.kind is EventKind.PAGE_WRITE:
                stored.update(zip(e.keys, e.digests))
            elif e.kind is EventKind.LOAD_BACK:
                for index, (key, digest) in enumerate(zip(e.keys, e.digests)):
                    if key in stored and stored[key] != digest:
                        slot = e.slots[index] if index < len(e.slots) else None
                        yield Violation("S5", f"loaded-back bytes of page {key} differ from the stored bytes", e, slot)


def _load_shape(e: Event, page_size: int, state_pools: set) -> Iterator[Violation]:
    """One unit of slots per page key: a page (page_size slots) in a token pool, one slot in a state pool."""
    width = 1 if e.pool in state_pools else page_size
    if len(e.slots) != len(e.keys) * width:
        yield Violation("S5", f"{e.op}: a load of {len(e.keys)} page key(s) of pool {e.pool} into {len(e.slots)} slots "
                              f"({width} per key): a page's bytes would land in another page's slots, or a slot stay unloaded", e)


def _commit_shape(e: Event, page_size: int) -> Iterator[Violation]:
    """The tree is handed one page key per page of slots: any other pairing keys a page's bytes by another page's key."""
    if len(e.slots) != len(e.keys) * page_size:
        yield Violation("S5", f"{e.op}: a commit hands the tree {len(e.slots)} slots of pool {e.pool} with {len(e.keys)} page key(s) "
                              f"({page_size} slots per key): a page's bytes would be kept under another page's key", e)


# --- fence -------------------------------------------------------------------

def check_f3(ctx: CheckContext) -> Iterator[Violation]:
    """F3: an op slot enters the tree only after a successful load into it has ended."""
    for trace in ctx.traces.values():
        loaded: set[SlotKey] = set()
        load_ios: set[int] = set()
        for e in trace.events:
            if e.kind is EventKind.ALLOC:
                for key, _ in slot_keys(e):
                    loaded.discard(key)
            elif e.kind is EventKind.IO_START and e.value == LOAD:
                load_ios.add(e.io)
            elif e.kind is EventKind.IO_END and e.io in load_ios and e.value:
                # An IO may end in parts (the pages that arrived, the pages that failed).
                for key, _ in slot_keys(e):
                    loaded.add(key)
            elif e.kind is EventKind.INSERT and e.op is not None:
                for key, slot in slot_keys(e):
                    if key not in loaded:
                        yield Violation("F3", f"inserted by {e.op} without a completed load of its bytes", e, slot)


def check_f10(ctx: CheckContext) -> Iterator[Violation]:
    """F10: a window pool's pages enter the tree only as the whole window loaded for exactly the committed length.

    An operation names its window pools in its OP_START ('window_pools').
    Each window is loaded in one transfer; its pages count only if that
    transfer ended loaded in every slot, and only for the hit length in
    effect when it began (spec.fence.window_attachable_at_terminate).
    """
    for trace in ctx.traces.values():
        windows: dict[str, set[str]] = {}  # op -> window pools (from OP_START)
        hit: dict[str, int] = {}
        load: dict[tuple[str, str], tuple[int, int, set[int]]] = {}  # (op, pool) -> (io, loaded for, slots)
        done: dict[int, set[int]] = defaultdict(set)
        committed: dict[str, int] = {}
        page_size: dict[str, int] = {}
        for e in trace.events:
            if e.kind is EventKind.OP_START and isinstance(e.value, dict):
                windows[e.op] = set(e.value.get("window_pools", ()))
                page_size[e.op] = int(e.value.get("page_size", 1))
            elif e.kind is EventKind.HIT:
                hit[e.op] = int(e.value)
            elif e.kind is EventKind.IO_START and e.value == LOAD and e.pool in windows.get(e.op, ()) and (e.op, e.pool) not in load:
                load[(e.op, e.pool)] = (e.io, hit.get(e.op, 0), set(e.slots))
            elif e.kind is EventKind.IO_END and e.value and e.io is not None:
                done[e.io].update(e.slots)
            elif e.kind is EventKind.COMMIT:
                committed[e.op] = int(e.value)
            elif e.kind is EventKind.INSERT and e.pool in windows.get(e.op, ()) and e.slots:
                started = load.get((e.op, e.pool))
                tokens = committed.get(e.op)
                if started is None:
                    yield Violation("F10", f"window pages of {e.op} inserted without a window load", e)
                    continue
                io, pages, slots = started
                missing = sorted(slots - done[io])
                if missing:
                    yield Violation("F10", f"window of {e.op} attached although slots {missing[:8]} of it never loaded (a partial window)", e)
                elif tokens is not None and tokens != pages * page_size.get(e.op, 1):
                    yield Violation(
                        "F10",
                        f"window of {e.op} loaded for a hit of {pages} pages attached to a commit of {tokens} tokens (another length's window)",
                        e,
                    )


# --- decision and combine, as recorded -------------------------------------

def _votes(ctx: CheckContext) -> dict[tuple[str, int], dict[int, Event]]:
    votes: dict[tuple[str, int], dict[int, Event]] = defaultdict(dict)
    for rank, trace in ctx.traces.items():
        for e in trace.events:
            if e.kind is EventKind.VOTE:
                votes[(e.op, e.step)][rank] = e
    return votes




def check_decision(ctx: CheckContext) -> Iterator[Violation]:
    """D1-D5 (A1 for the ACK drain): every recorded vote equals the profile's vote for the state it recorded."""
    vote, clause = ctx.profile.vote, ctx.profile.vote_clause
    for trace in ctx.traces.values():
        for e in trace.events:
            if e.kind is EventKind.VOTE and e.state is not None and bool(e.value) != vote(e.state):
                yield Violation(clause(e.state), f"voted {bool(e.value)} where the spec votes {vote(e.state)}"
                                                 + suffix(e.state, bool(e.value)), e)


def check_x1(ctx: CheckContext) -> Iterator[Violation]:
    """X1: a check terminates iff every rank voted yes or any rank had terminated.

    The combine is judged on the votes the ranks recorded (what entered the
    collective): a vote the spec disagrees with is D1-D5's violation, and the
    decision that follows from it is not X1's too.
    """
    terminates = terminates_by_step(ctx)
    for (op, step), by_rank in _votes(ctx).items():
        if len(by_rank) < len(ctx.traces) or any(v.state is None for v in by_rank.values()):
            continue
        ranks = sorted(by_rank)
        expected = ctx.profile.decisions(by_rank[ranks[0]].state.policy, [bool(by_rank[r].value) for r in ranks],
                                         [by_rank[r].state.terminated for r in ranks])
        for rank, want in zip(ranks, expected):
            got = rank in terminates.get((op, step), {})
            if got != want:
                verb = "terminated" if got else "did not terminate"
                yield Violation(ctx.profile.combine_clause, f"{verb} {op} at step {step}; the combine of the votes every rank cast says {want}", by_rank[rank])


def check_x2(ctx: CheckContext) -> Iterator[Violation]:
    """X2 (A2 for the ACK drain): the profile's vote collectives per check; for the vote per check, one vote collective per check on each vote group under wait_complete and timeout, none under best_effort.

    A rank's vote groups are the groups its vote collectives ran on anywhere in
    its trace (one unlabelled group for an implementation with one group);
    each check needs exactly one on each. Checked on multi-rank traces only:
    with one rank there is nobody to disagree with, and implementations may
    skip the no-op reduce.
    """
    if len(ctx.traces) < 2:
        return
    for rank, trace in ctx.traces.items():
        counts: dict[tuple[str, int, str | None], int] = defaultdict(int)
        groups: set[str | None] = set()
        for e in trace.events:
            if e.kind is EventKind.COLLECTIVE and e.value == VOTE_COLLECTIVE and e.step is not None:
                counts[(e.op, e.step, e.group)] += 1
                groups.add(e.group)
        for e in trace.events:
            if e.kind is not EventKind.VOTE or e.state is None:
                continue
            want = ctx.profile.collectives(e.state.policy)
            for group in sorted(groups or {None}, key=str):
                got = counts.get((e.op, e.step, group), 0)
                if got != want:
                    on = f" on group {group}" if group is not None else ""
                    yield Violation(ctx.profile.collectives_clause,
                                    f"{got} vote collectives{on} in this check (rank {rank}, step {e.step}); {e.state.policy.value} needs {want}", e)


def check_fence_lock(ctx: CheckContext) -> Iterator[Violation]:
    """F1, F2, F5, F7, S1, S3, L4 where kept by a lock: each fenced section entered without the operation's lock (spec/fence_lock.py)."""
    for rank, trace in sorted(ctx.traces.items()):
        yield from unfenced_violations(rank, trace.unfenced)


def unfenced_violations(rank: int, unfenced: Iterable[UnfencedSection]) -> Iterator[Violation]:
    """The fence_lock checker's verdicts from a recorder's unfenced sections alone (no events needed)."""
    for entered in unfenced:
        yield Violation(entered.clause, f"rank {rank}: {entered.describe()}")




CHECKERS: dict[str, Checker] = {
    "fence_lock": check_fence_lock,  # first: a section run unlocked is the cause of what the others may see
    "S1": check_s1,
    "S2": check_s2,
    "S3": check_s3,
    "S4": check_s4,
    "S5": check_s5,
    "F3": check_f3,
    "F10": check_f10,
    "D": check_decision,
    "X1": check_x1,
    "X2": check_x2,
    "L1": check_l1,
    "L2": check_l2,
    "L3": check_l3,
    "L4": check_l4,
}


def check(
    traces: Trace | Iterable[Trace],
    config: TerminationConfig | None = None,
    *,
    clauses: Iterable[str] | None = None,
    closed: bool = True,
    profile: Profile | str | None = None,
) -> list[Violation]:
    """Run the checkers (all by default) over every rank's trace.

    closed=True means every operation in the traces has finished, so slots
    still held are leaks. profile: the architecture the implementation
    declares (spec/profiles.py; default: this spec's own), whose vote,
    combine and timer the decision checkers apply.
    """
    if isinstance(traces, Trace):
        traces = [traces]
    by_rank: dict[int, Trace] = {}
    for trace in traces:
        if trace.rank in by_rank:
            raise ConfigError("rank", trace.rank, "one trace per rank")
        by_rank[trace.rank] = trace
    declared = {t.profile for t in by_rank.values() if t.profile is not None}
    if profile is None and len(declared) > 1:
        raise ConfigError("trace profiles", sorted(declared), "one architecture profile for every rank's trace")
    if profile is None and declared:
        profile = declared.pop()
    selected = list(CHECKERS) if clauses is None else list(clauses)
    for name in selected:
        if name not in CHECKERS:
            raise ConfigError("clauses", name, "one of " + ", ".join(CHECKERS))
    ctx = CheckContext(traces=by_rank, config=config, closed=closed, profile=find_profile(profile))
    out: list[Violation] = []
    for name in selected:
        out.extend(CHECKERS[name](ctx))
    return out
