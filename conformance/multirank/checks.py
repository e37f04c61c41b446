"""Checks across ranks: what the parent requires of every multi-rank scenario (its oracle).

Each check reads what the ranks sent back (traces, scheduler steps, loads) and
returns messages naming the rank, the step and the clause; an empty list means
the scenario conforms.
"""

from __future__ import annotations

import re
from typing import Iterable

from conformance.report.failures import CLAUSE_LABEL
from spec.clauses import CATALOGUE
from spec.config import TerminationConfig
from spec.decision import VOTE_COLLECTIVE
from spec.fence import HitPolicy, committable_at_terminate
from spec.invariants import check
from spec.profiles import Profile, profile as find_profile
from spec.trace import EventKind, Trace

from conformance.multirank.records import ScenarioOutcome

# A result note: the scenario gave the ranks host tiers of different room, so the prefetch each queued may differ.
REQUESTED_MAY_DIFFER = "requested_may_differ"
CONSEQUENCE = "then (a consequence): "  # a line that names no clause of its own: it follows from the one above it
LEAK_LINE = re.compile(r"F8: cache (?P<cache>\d+) (?P<space>\w+):(?P<pool>\w+): ")  # driver.RankCache.close's accounting line

def scenario_problems(outcome: ScenarioOutcome) -> list[str]:
    """Everything the harness requires of any multi-rank scenario, as messages."""
    died = once_per_error((r.rank, error) for r in outcome.ranks for error in r.background_errors)
    if died:
        # A background thread that died on one rank explains what its peers then waited for: name that rule only.
        return died + [f"{CONSEQUENCE}{unlabelled(line)}" for line in rank_errors(outcome)]
    out = rank_errors(outcome)
    if out:
        return out
    traced: list[str] = []
    leaked: set[tuple[int, str, str]] = set()  # (cache, space, pool) where the trace names slots never freed (S3)
    caches = min(len(r.traces) for r in outcome.ranks)
    for cache in range(caches):
        config = outcome.ranks[0].configs[cache]
        traces = [r.traces[cache] for r in outcome.ranks]
        violations = list(check(traces, config))
        leaked |= {(cache, v.event.space, v.event.pool) for v in violations if v.clause == "S3" and v.event is not None
                   and v.message.endswith("(leaked)")}
        traced += [f"cache {cache}: {v}" for v in violations]
        if CATALOGUE["X4"].applies_to(_profile(traces).id):
            traced += _x4_vote_count(outcome, cache, config)
        traced += _commit_oracle_problems(outcome, cache, config)
    for r in outcome.ranks:
        if r.leftover_threads:
            out.append(f"rank {r.rank}: threads still running after close(): {r.leftover_threads}")
        out += [f"rank {r.rank}: {leak}" for leak in r.leaks if not _traced_leak(leak, leaked)]
        out += [f"rank {r.rank}: {load.request_id}: {load.error}" for load in r.loads if load.error]
    out += traced
    # Slots the trace already names as leaked (S3) are what an emptied tier still holds: one cause, named once.
    out += [f"{CONSEQUENCE}rank {r.rank}: {unlabelled(leak)}" for r in outcome.ranks for leak in r.leaks
            if _traced_leak(leak, leaked)]
    out += _same_decisions(outcome)
    out += _same_requested(outcome)
    return _after_a_collective_mismatch(_after_a_commit_mismatch(out))


def _after_a_commit_mismatch(problems: list[str]) -> list[str]:
    """Ranks that committed different lengths (S4) are named for that; slots a rank then kept (F8) are its consequence.

    Each rank's tree holds what that rank committed: once they disagree, the
    pages one rank inserted and its peer never did stay on that rank alone
    through evict_all, so its accounting leak follows from the disagreement.
    """
    mismatch = [p for p in problems if _names(p, "S4")]
    if not mismatch:
        return problems
    rest = [p for p in problems if p not in mismatch]
    return mismatch + [f"{CONSEQUENCE}{unlabelled(p)}" if _names_only(p, {"F8"}) else p for p in rest]


def _after_a_collective_mismatch(problems: list[str]) -> list[str]:
    """Ranks that ran different collectives (L3) are named for that alone; the rest is its consequence.

    In a deployment the ranks would block there; what the harness sees after it
    (commits that differ, slots a diverged rank kept, another rank's wait) is
    what running on past that point produced, not a second defect.
    """
    mismatch = [p for p in problems if _names(p, "L3")]
    if not mismatch:
        return problems
    rest = [p for p in problems if p not in mismatch]
    return mismatch + [p if p.startswith(CONSEQUENCE) else f"{CONSEQUENCE}{unlabelled(p)}" for p in rest]


def _own_clauses(problem: str) -> set[str]:
    """The clauses the message names as its own findings (a consequence names none)."""
    if problem.startswith(CONSEQUENCE):
        return set()
    return {clause for m in CLAUSE_LABEL.finditer(problem) for clause in m.group(1).split("/")}


def _names_only(problem: str, clauses: set[str]) -> bool:
    """Whether the message names a clause of its own, and every one it names is one of `clauses`."""
    own = _own_clauses(problem)
    return bool(own) and own <= clauses


def _names(problem: str, clause: str) -> bool:
    return clause in _own_clauses(problem)


def _traced_leak(leak: str, leaked: set[tuple[int, str, str]]) -> bool:
    """Whether an accounting leak ("F8: cache N SPACE:POOL: ...") is of a pool whose leaked slots the trace names."""
    found = LEAK_LINE.match(leak)
    return found is not None and (int(found["cache"]), found["space"], found["pool"]) in leaked


def _profile(traces: Iterable[Trace]) -> Profile:
    """The profile the ranks' traces were recorded under (the adapter's declaration)."""
    return find_profile(next((t.profile for t in traces if t.profile is not None), None))


def unlabelled(text: str) -> str:
    """The text with its clause labels ("L4: ") turned into plain words ("L4 "), so it names no clause of its own."""
    return CLAUSE_LABEL.sub(lambda m: m.group(1) + " ", text)


def rank_errors(outcome: ScenarioOutcome) -> list[str]:
    """Each distinct error once, with the ranks that raised it (a deviation every rank found is one finding)."""
    return once_per_error((r.rank, f"failed at {r.phase}: {r.error}") for r in outcome.ranks if r.error)


def once_per_error(errors: Iterable[tuple[int, str]]) -> list[str]:
    """(rank, error) pairs as one line per distinct error, naming the ranks that raised it, in first-seen order."""
    by_error: dict[str, list[int]] = {}
    for rank, error in errors:
        by_error.setdefault(error, []).append(rank)
    return [f"{'rank' if len(ranks) == 1 else 'ranks'} {', '.join(map(str, ranks))} {error}" for error, ranks in by_error.items()]


def same_usable_prefix_problems(outcome: ScenarioOutcome) -> list[str]:
    """After the same commit, every rank can use the same prefix (ranks serve shards of one prefix).

    A rank that attaches a trailing state (F4) where a peer dropped its own
    would serve a longer match there: the ranks' schedulers then disagree.
    """
    loaded: dict[tuple[int, str], dict[int, int]] = {}
    for r in outcome.ranks:
        for load in r.loads:
            loaded.setdefault((load.cache, load.request_id), {})[r.rank] = load.tokens
    out = []
    # A state (F4) or a window (F10) kept on some ranks only makes them serve different prefixes.
    policies = set(outcome.ranks[0].pools.values())
    clauses = "/".join(["S4", *(clause for policy, clause in ((HitPolicy.TRAILING_PAGES, "F4"), (HitPolicy.TRAILING_WINDOW, "F10"))
                                if policy.value in policies)])
    for (cache, op), by_rank in sorted(loaded.items()):
        if len(set(by_rank.values())) > 1:
            commits = outcome.commits(op, cache)
            detail = ", ".join(f"rank {rank}: {tokens}" for rank, tokens in sorted(by_rank.items()))
            out.append(f"{clauses}: {op}: every rank committed {sorted(set(commits.values()))} tokens, but load-back serves different prefixes ({detail})")
    return out


def _same_decisions(outcome: ScenarioOutcome) -> list[str]:
    """X1/S4 as the scheduler sees them: each step finishes the same ids with the same length on every tracking rank."""
    out = []
    combine = _profile(t for r in outcome.ranks for t in r.traces).combine_clause
    lengths = {len(r.checks) for r in outcome.ranks}
    if len(lengths) > 1:
        return [f"ranks ran different numbers of checks: {[len(r.checks) for r in outcome.ranks]}"]
    for index in range(lengths.pop()):
        records = [r.checks[index] for r in outcome.ranks]
        if len({(c.cache, c.label, c.ids) for c in records}) > 1:
            out.append(f"check {index}: ranks disagree on the agreed list: {[(c.label, c.ids) for c in records]}")
            continue
        for request_id in records[0].ids:
            seen = {r.rank: c.finished.get(request_id) for r, c in zip(outcome.ranks, records) if request_id not in c.untracked}
            if len(set(seen.values())) > 1:
                detail = ", ".join(f"rank {rank}: {'not finished' if v is None else f'{v} tokens'}" for rank, v in seen.items())
                lengths = {v for v in seen.values() if v is not None}
                # Some finished and some not: the combine's rule; all finished, with different lengths: S4's.
                clause = "S4" if None not in seen.values() else (combine + ("/S4" if len(lengths) > 1 else ""))
                out.append(f"{clause}: at {records[0].label}, ranks decided {request_id} differently ({detail})")
    return out


def _same_requested(outcome: ScenarioOutcome) -> list[str]:
    if any(r.notes.get(REQUESTED_MAY_DIFFER) for r in outcome.ranks):
        return []  # the ranks' host tiers differ, so may what each queued: the hit is agreed (S4 judges what follows)
    requested = {r.rank: r.requested for r in outcome.ranks}
    if len({tuple(sorted(v.items())) for v in requested.values()}) > 1:
        return [f"ranks queued different prefetch lengths: {requested}"]
    return []


def _x4_vote_count(outcome: ScenarioOutcome, cache: int, config: TerminationConfig) -> list[str]:
    """X2/X4: per check, one vote collective per agreed id on every rank, tracked or not (on each of its vote groups)."""
    if not config.policy.uses_collective:
        return []
    out = []
    for r in outcome.ranks:
        steps = _steps_of(r.traces[cache])
        votes: dict[tuple[int, str | None], list[str]] = {}
        groups: set[str | None] = set()
        for e in r.traces[cache].events:
            if e.kind is EventKind.COLLECTIVE and e.value == VOTE_COLLECTIVE and e.step is not None:
                votes.setdefault((e.step, e.group), []).append(e.op)
                groups.add(e.group)
        for check_record, step in zip([c for c in r.checks if c.cache == cache], steps):
            for group in sorted(groups or {None}, key=str):
                got = votes.get((step, group), [])
                if got != list(check_record.ids):
                    on = f" on group {group}" if group is not None else ""
                    out.append(f"X4: rank {r.rank} {check_record.label} (step {step}){on}: vote collectives for {got}, agreed list {list(check_record.ids)}")
    return out


def _steps_of(trace: Trace) -> list[int]:
    return [e.step for e in trace.events if e.kind is EventKind.STEP]


def expected_commit_pages(outcome: ScenarioOutcome, request_id: str, cache: int = 0) -> int | None:
    """The spec's commit (F3, S4): MIN over ranks of what each rank could vouch for when it terminated.

    Computed from IO facts in each rank's trace (loads that ended well before
    its TERMINATE), never from the length the implementation reports. None
    when some rank never terminated the request.
    """
    local = _committable_by_rank(outcome, request_id, cache)
    return None if local is None else min(local.values())


def _committable_by_rank(outcome: ScenarioOutcome, request_id: str, cache: int) -> dict[int, int] | None:
    """rank -> pages that rank could vouch for at its terminate; None when some rank never terminated the request."""
    local = {}
    for r in outcome.ranks:
        pages = committable_at_terminate(r.traces[cache].events, request_id, r.pools, outcome.ranks[0].configs[cache].page_size)
        if pages is None:
            return None
        local[r.rank] = pages
    return local


def _commit_oracle_problems(outcome: ScenarioOutcome, cache: int, config: TerminationConfig) -> list[str]:
    out = []
    ops = sorted({e.op for r in outcome.ranks for e in r.traces[cache].events if e.kind is EventKind.COMMIT})
    for op in ops:
        local = _committable_by_rank(outcome, op, cache)
        if local is None:
            continue
        got = outcome.commits(op, cache)
        spec = min(local.values()) * config.page_size
        if all(tokens == spec for tokens in got.values()):
            continue
        # Ranks that differ break S4; a length past the fence is F3's, unless the fence is low only because
        # some rank left the request on its own (revoked or aborted it) while its peers, each within the pages
        # it loaded itself, committed: that is the disagreement, and those commits follow from it.
        clauses = ["S4"] if len(set(got.values())) > 1 else []
        past_fence = any(tokens > spec for tokens in got.values())
        if past_fence and not (clauses and _left_alone(outcome, op, cache, local, got, config.page_size)):
            clauses.append("F3")
        clauses += ["F11"] if not clauses else []
        out.append(f"{'/'.join(clauses)}: {op}: the fence's commit is {spec} tokens (MIN over ranks of loaded pages at terminate); committed {got}")
    return out


def _left_alone(outcome: ScenarioOutcome, op: str, cache: int, local: dict[int, int], got: dict[int, int], page_size: int) -> bool:
    """Whether the ranks at the fence's MIN revoked `op` on their own while some peer did not, and no rank committed
    past the pages it loaded itself."""
    revoked = {r.rank for r in outcome.ranks if any(e.kind is EventKind.REVOKE and e.op == op for e in r.traces[cache].events)}
    lowest = min(local.values())
    at_min = {rank for rank, pages in local.items() if pages == lowest}
    within_own = all(tokens <= local.get(rank, 0) * page_size for rank, tokens in got.items())
    return at_min <= revoked and bool(set(local) - revoked) and within_own
