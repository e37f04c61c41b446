"""The liveness checkers over recorded traces: L1 (complete waits end), L2 (timeouts end), L3 (same collectives), L4 (bounded IO)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Callable, Iterator, Sequence

from spec.config import Policy
from spec.decision import DecisionState
from spec.divergences import suffix
from spec.groups import group_members
from spec.profiles import TimerStart, is_complete
from spec.timeout import is_timed_out, timeout_budget
from spec.trace import LOAD, Event, EventKind, Trace
from spec.trace_checks import CheckContext, Violation, op_ended, terminates_by_step

# --- liveness ----------------------------------------------------------------

@dataclass(frozen=True)
class _OpInfo:
    policy: Policy
    start: float
    page_size: int


def _op_infos(ctx: CheckContext) -> dict[str, _OpInfo]:
    out: dict[str, _OpInfo] = {}
    for trace in ctx.traces.values():
        for e in trace.events:
            if e.kind is EventKind.OP_START and e.op not in out:
                value = e.value or {}
                out[e.op] = _OpInfo(
                    policy=Policy.parse(value.get("policy")),
                    start=float(value.get("start", e.t)),
                    page_size=int(value.get("page_size", 1)),
                )
    return out


def check_l1(ctx: CheckContext) -> Iterator[Violation]:
    """L1: wait_complete ends at the first check after all IO ended, committing the whole hit when IO succeeded."""
    infos = _op_infos(ctx)
    troubled = _ops_with(ctx, lambda e: e.kind in (EventKind.REVOKE, EventKind.IO_EXPIRED) or (e.kind is EventKind.IO_END and e.op is not None and not e.value))
    for trace in ctx.traces.values():
        done: set[str] = set()
        ended: set[str] = set()
        for e in trace.events:
            info = infos.get(e.op)
            if info is None or info.policy is not Policy.WAIT_COMPLETE:
                continue
            if e.kind is EventKind.IO_DONE:
                done.add(e.op)
            elif op_ended(e.kind):
                ended.add(e.op)
            elif e.kind is EventKind.VOTE and e.op in done and e.op not in ended:
                peers_done = all(_io_done_before_step(t, e.op, e.step) for t in ctx.traces.values())
                if peers_done and not _terminated_at(trace, e.op, e.step):
                    yield Violation("L1", f"all IO of {e.op} had ended on every rank, yet this check did not terminate it", e)
            elif e.kind is EventKind.COMMIT and e.op not in troubled and e.step is not None and _io_ended_before_terminate(ctx, e.op):
                # A commit outside any scheduler check (an abort) owes no hit; nor does one whose
                # check came before the IO ended: that early stop is the vote's violation (D2-D5, X1).
                want = _agreed_hit_pages(ctx, e.op)
                if want is not None and int(e.value) != want * info.page_size:
                    yield Violation(
                        "L1",
                        f"wait_complete committed {e.value} tokens of {e.op}; all its IO succeeded, so it must commit the whole hit ({want * info.page_size})",
                        e,
                    )


def _io_ended_before_terminate(ctx: CheckContext, op: str) -> bool:
    """On every rank, the IO of op ended before the scheduler terminated it."""
    for trace in ctx.traces.values():
        for e in trace.events:
            if e.op != op:
                continue
            if e.kind is EventKind.IO_DONE:
                break
            if e.kind is EventKind.TERMINATE:
                return False
        else:
            return False
    return True


def _ops_with(ctx: CheckContext, predicate: Callable[[Event], bool]) -> set[str]:
    return {e.op for t in ctx.traces.values() for e in t.events if e.op is not None and predicate(e)}


def _agreed_hit_pages(ctx: CheckContext, op: str) -> int | None:
    """MIN over ranks of each rank's last HIT for op; None if a rank has none."""
    pages: list[int] = []
    for trace in ctx.traces.values():
        hits = [int(e.value) for e in trace.events if e.kind is EventKind.HIT and e.op == op]
        if not hits:
            return None
        pages.append(hits[-1])
    return min(pages)


def _io_done_before_step(trace: Trace, op: str, step: int) -> bool:
    """Whether this rank's vote at `step` saw IO_DONE: recorded before the vote's snapshot (`seen`), or before the vote."""
    done_at = None
    for e in trace.events:
        if e.kind is EventKind.IO_DONE and e.op == op and done_at is None:
            done_at = e.seq
        elif e.kind is EventKind.VOTE and e.op == op and e.step == step:
            observed = e.seen if e.seen is not None else e.seq
            return done_at is not None and done_at < observed
        elif op_ended(e.kind) and e.op == op:
            return True
    return False


def _terminated_at(trace: Trace, op: str, step: int) -> bool:
    return any(
        (e.kind is EventKind.TERMINATE and e.op == op and e.step is not None and e.step <= step)
        or (e.kind is EventKind.REVOKE and e.op == op)
        for e in trace.events
    )


def check_l2(ctx: CheckContext) -> Iterator[Violation]:
    """L2: under timeout, a rank past its deadline votes yes; a check where every rank is past it terminates.

    The deadline counts from where the profile starts its timer: the operation's start, or the first check that found it unfinished.
    """
    if ctx.config is None:
        return
    infos = _op_infos(ctx)
    past: dict[tuple[str, int], dict[int, Event]] = defaultdict(dict)
    blocked: dict[tuple[int, str], float] = {}
    for rank, trace in ctx.traces.items():
        hit: dict[str, int] = {}
        for e in trace.events:
            if e.kind is EventKind.HIT:
                hit[e.op] = int(e.value)
            elif e.kind is EventKind.VOTE and e.op in infos and infos[e.op].policy is Policy.TIMEOUT:
                if ctx.profile.timer_start is TimerStart.FIRST_BLOCKED_CHECK:
                    start = blocked.setdefault((rank, e.op), e.t)  # the first check that found it unfinished
                else:
                    start = infos[e.op].start
                budget = timeout_budget(ctx.config, hit.get(e.op, 0))
                if e.state is not None and not ctx.profile.votes_completion and is_complete(e.state):
                    continue  # a done operation waits for the drain's commit (A1); a commit that never comes is L4's
                if is_timed_out(start, e.t, budget):
                    past[(e.op, e.step)][rank] = e
                    if not e.value:
                        yield Violation("L2", f"voted no {e.t - start:.6g}s after start, past its {budget:.6g}s budget"
                                              + _divergence(e.state), e)
    terminates = terminates_by_step(ctx)
    for (op, step), by_rank in past.items():
        if len(by_rank) == len(ctx.traces):
            for rank, vote in by_rank.items():
                if rank not in terminates.get((op, step), {}):
                    # One design on every rank (the landed-KV hold) is a divergence; anything else holding the wait is not.
                    shared = {_divergence(v.state) for v in by_rank.values()}
                    why = shared.pop() if len(shared) == 1 else ""
                    yield Violation("L2", f"every rank was past the deadline of {op} at step {step}, yet it was not terminated{why}", vote)


def _divergence(state: DecisionState | None) -> str:
    """The divergence suffix of a no vote the harness judged past its deadline (whatever the cache's own timer said)."""
    return suffix(replace(state, timed_out=True), False) if state is not None else ""


def check_l3(ctx: CheckContext) -> Iterator[Violation]:
    """L3: the ranks of each group run the same collectives on it, in the same order, per check and per operation.

    A collective names its group (spec/groups.py); an unlabelled one ran on the
    implementation's single group, every rank of the traces.
    """
    if len(ctx.traces) < 2:
        return
    ranks = sorted(ctx.traces)
    # (group, "step"|"op", step or op) -> rank -> [(name, op)]
    seqs: dict[tuple, dict[int, list[tuple[str, str | None]]]] = defaultdict(lambda: defaultdict(list))
    first: dict[tuple, Event] = {}
    for rank, trace in ctx.traces.items():
        for e in trace.events:
            if e.kind is not EventKind.COLLECTIVE:
                continue
            key = (e.group, "step", e.step) if e.step is not None else (e.group, "op", e.op)
            seqs[key][rank].append((e.value, e.op))
            first.setdefault((key, rank), e)
    for key, by_rank in sorted(seqs.items(), key=lambda item: (str(item[0][0]), item[0][1], str(item[0][2]))):
        group, where, at = key
        members = [r for r in (group_members(group) or ranks) if r in ctx.traces]
        if len(members) < 2:
            continue
        reference = by_rank.get(members[0], [])
        for rank in members[1:]:
            got = by_rank.get(rank, [])
            if got == reference:
                continue
            event = first.get((key, rank)) or first.get((key, members[0]))
            on = f" on group {group}" if group is not None else ""
            if where == "step":
                message = f"step {at}{on}: rank {rank} ran collectives {_fmt(got)}, rank {members[0]} ran {_fmt(reference)}"
            else:
                message = f"operation {at}{on}: rank {rank} ran {[name for name, _ in got]}, rank {members[0]} ran {[name for name, _ in reference]}"
            yield Violation("L3", message, event)


def _io_bounds(ctx: CheckContext) -> dict[str, float]:
    """op -> the bound on each of its transfers, as its OP_START states it (io_timeout_s)."""
    out: dict[str, float] = {}
    for trace in ctx.traces.values():
        for e in trace.events:
            if e.kind is EventKind.OP_START and isinstance(e.value, dict) and e.value.get("io_timeout_s") is not None:
                out.setdefault(e.op, float(e.value["io_timeout_s"]))
    return out


def check_l4(ctx: CheckContext) -> Iterator[Violation]:
    """L4: at a check, a load past its bound has ended or counts as failed; its pages are never inserted.

    The check's time is its STEP event's (the bound is judged when the check
    begins); a load counts as failed from its IO_EXPIRED on, which must come
    strictly after its bound, and its slots then never enter the tree for
    that operation.
    """
    bounds = _io_bounds(ctx)
    for trace in ctx.traces.values():
        step_at: dict[int, float] = {}
        started: dict[int, Event] = {}
        closed_at: dict[int, int] = {}  # io -> seq of its first IO_END or IO_EXPIRED
        failed: set[tuple[str, str, int]] = set()  # (op, pool, slot) of expired loads
        for e in trace.events:
            bound = bounds.get(e.op)
            if e.kind is EventKind.STEP:
                step_at[e.step] = e.t
            elif bound is None:
                continue
            elif e.kind is EventKind.IO_START and e.value == LOAD:
                started[e.io] = e
            elif e.kind in (EventKind.IO_END, EventKind.IO_EXPIRED) and e.io in started:
                closed_at.setdefault(e.io, e.seq)
                if e.kind is EventKind.IO_EXPIRED:
                    since = e.t - started[e.io].t
                    if since <= bound:
                        yield Violation("L4", f"a load of {e.op} counted failed {since:.6g}s after it started, within its {bound:.6g}s bound", e)
                    failed.update((e.op, e.pool, slot) for slot in e.slots)
            elif e.kind is EventKind.VOTE:
                now = step_at.get(e.step, e.t)
                observed = e.seen if e.seen is not None else e.seq
                for io, start in started.items():
                    if start.op == e.op and start.seq < observed and closed_at.get(io, observed) >= observed and now - start.t > bound:
                        yield Violation(
                            "L4",
                            f"load {io} of {e.op} ({start.pool}) started {now - start.t:.6g}s before this check, past its "
                            f"{bound:.6g}s bound, yet it had neither ended nor been counted failed",
                            e,
                        )
            elif e.kind is EventKind.INSERT:
                for slot in e.slots:
                    if (e.op, e.pool, slot) in failed:
                        yield Violation("L4", f"inserted by {e.op} from a load that had been counted failed (past its bound)", e, slot)


def _fmt(calls: Sequence[tuple[str, str | None]]) -> str:
    return "[" + ", ".join(f"{name}({op})" for name, op in calls) + "]"
