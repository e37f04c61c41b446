"""The cross-rank explorer's model: scenarios, schedules as strings, and which actions a state enables.

A scenario prefetches one stored request on every rank and lets the ranks'
local state differ wherever it can in a deployment:

- setup, per rank (one token at most, before the request is prefetched):
    fail<r>.<t>  rank r's t-th load of the request fails in storage (a storage fault);
    miss<r>      rank r's storage lacks the last KV batch's pages: its backup of them failed (the storage hit length);
    room<r>      rank r's host tier has room for the request and one page: a second request, written while the
                 prefetch holds its host slots, finds none for its backup there (a backup writes nothing);
    room<r>p     the same host tier, the second request written before the prefetch: the prefetch takes fewer
                 host slots there (a rank allocates fewer host slots);
- actions, once the request is queued on every rank:
    io<r>        rank r's held transfer goes through (it runs until the next one is held, or the IO ends);
    tick<r>      rank r's clock passes the prefetch's timeout;
    abort<r>     rank r's own clock passes the scheduler's waiting timeout: it aborts the request alone;
    check        one scheduler step on every rank (the collectives); `check:io<r>` lets rank r's held transfer
                 through between its vote and its terminate (window 2; timeout, a rank past its deadline).

A schedule is its tokens joined by commas, setup first: "fail1.2,io0,io1,check,io1,check".
Its meaning: these actions in this order, then the canonical finish (every held
transfer goes through, then checks until every rank ended the request), then
load-back and the accounting.

Reduction. Ranks share nothing but their collectives and the storage the
setup wrote before anything is explored, so actions of different ranks
between two checks commute: only the order rank 0 before rank 1 before ... is
enabled between two checks (one schedule per Mazurkiewicz class), and a
tick comes first among its own rank's actions (the IO thread never reads the
clock between two actions). A check that ends the request on no rank changes
nothing a later action depends on (the single-rank explorer's rule), so a
state reached after such a check a second time is not explored again.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, fields
from typing import Any, Mapping, Sequence

from spec.config import Policy
from spec.errors import ConfigError

CHECK = "check"
# The names the explorer's two rank-side scenarios carry in the multi-rank registry (entry.py registers them).
EXPLORE_SCENARIO = "crossrank"
SCHEDULE_SCENARIO = "crossrank_schedule"
CURRENT_FILE = "explore-current.txt"  # in the launch's workdir: the schedule running now (a hang's report names it)
FAILURES_FILE = "explore-failures.pkl"  # in the launch's workdir: the failures found so far (search.Failure)
SUMMARY_NOTE = "explore"  # the result note carrying an exploration's summary (search.Summary)
REQUEST = "r1"
SECOND_REQUEST = "r2"  # the room setups' second request: written, never prefetched

# The room setups: what the rank with less room finds none for (its token's suffix).
ROOM_KINDS = {None: "", "backup": "", "prefetch": "p"}

_SETUP = re.compile(r"^(?:fail(?P<fail>\d+)\.(?P<load>\d+)|miss(?P<miss>\d+)|room(?P<room>\d+)(?P<early>p?))$")
_LOCAL = re.compile(r"^(?P<kind>io|tick|abort)(?P<rank>\d+)$")
_CHECK = re.compile(r"^check((?::io\d+)*)$")


@dataclass(frozen=True)
class CrossRankScenario:
    """One request on world_size ranks, and the rank-local divergences explored around it.

    pages = kv_batches * batch_pages; extra_pools None: the adapter's default,
    its first `sidecars` pools when given (the fewest it runs with, at least).
    ticks: per rank, clock ticks past the prefetch's timeout (timeout only);
    aborts: rank-local aborts in all; faults, misses: explore each rank's
    setup of that kind (one rank at a time); room: "backup" (a backup writes
    nothing on one rank) or "prefetch" (a prefetch takes fewer host slots
    there), each rank in turn; window: window-2 checks;
    layout: several vote groups (conformance.multirank.scenarios.GROUP_LAYOUTS);
    checks: a bound on the checks explored before the finish (None: until
    no rank waits, exhaustive).
    """

    name: str
    policy: str
    world_size: int = 2
    kv_batches: int = 2
    batch_pages: int = 1
    extra_pools: tuple[str, ...] | None = None
    sidecars: int | None = None
    ticks: int = 0
    aborts: int = 0
    faults: bool = False
    misses: bool = False
    room: str | None = None
    window: bool = False
    layout: str | None = None
    checks: int | None = None
    seed: int = 21
    max_schedules: int = 5000

    def __post_init__(self) -> None:
        Policy.parse(self.policy, "policy")
        for name in ("world_size", "kv_batches", "batch_pages", "max_schedules"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < (2 if name == "world_size" else 1):
                raise ConfigError(name, value, "an integer >= 2 (ranks)" if name == "world_size" else "an integer > 0")
        for name in ("ticks", "aborts", "sidecars", "checks"):
            value = getattr(self, name)
            if name in ("sidecars", "checks") and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < (1 if name == "checks" else 0):
                raise ConfigError(name, value, "an integer >= 1" if name == "checks" else "an integer >= 0")
        for name in ("faults", "misses", "window"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(name, getattr(self, name), "True or False")
        if self.room not in ROOM_KINDS:
            raise ConfigError("room", self.room, "None, " + " or ".join(repr(k) for k in ROOM_KINDS if k))
        if self.extra_pools is not None and (isinstance(self.extra_pools, str) or not isinstance(self.extra_pools, tuple)):
            raise ConfigError("extra_pools", self.extra_pools, "None (the adapter's default) or a tuple of pool names")
        if self.ticks and self.policy != "timeout":
            raise ConfigError("ticks", self.ticks, "0 unless the policy is timeout (a tick changes no other policy's decision)")

    @property
    def pages(self) -> int:
        return self.kv_batches * self.batch_pages

    @property
    def policy_value(self) -> Policy:
        return Policy.parse(self.policy, "policy")

    def as_fields(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_fields(cls, values: Mapping[str, Any]) -> "CrossRankScenario":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError("scenario fields", unknown, "fields of CrossRankScenario: " + ", ".join(sorted(known)))
        values = dict(values)
        if values.get("extra_pools") is not None:
            values["extra_pools"] = tuple(values["extra_pools"])
        return cls(**values)

    def pools_for(self, adapter: Any) -> tuple[str, ...]:
        """The extra pools this scenario runs an adapter with."""
        if self.extra_pools is not None:
            return self.extra_pools
        default = tuple(adapter.default_extra_pools)
        if self.sidecars is None:
            return default
        least = 0 if "no_extra_pools" in adapter.capabilities else min(1, len(default))
        return default[: max(self.sidecars, least)]

    def loads(self, extra_pools: Sequence[str]) -> int:
        """Gate points of the request's IO on one rank: each KV batch, then one per extra pool (kv_then_extras)."""
        return self.kv_batches + len(extra_pools)

    def setups(self, extra_pools: Sequence[str]) -> list[tuple[str, ...]]:
        """Every setup the scenario explores: one token (one rank's divergence) each, or none at all."""
        ranks = range(self.world_size)
        out: list[tuple[str, ...]] = []
        if self.faults:
            out += [(f"fail{r}.{t}",) for r in ranks for t in range(1, self.loads(extra_pools) + 1)]
        if self.misses:
            out += [(f"miss{r}",) for r in ranks]
        if self.room:
            out += [(f"room{r}{ROOM_KINDS[self.room]}",) for r in ranks]
        return out or [()]


# --- setup tokens, as each rank reads them ---------------------------------------------------


@dataclass(frozen=True)
class Setup:
    """What the setup tokens ask of one rank."""

    failing_load: int | None = None  # this rank's t-th load of the request fails
    missing_tail: bool = False  # this rank's storage lacks the last KV batch
    short_room: bool = False  # this rank's host tier holds the request and one page
    second_request: str | None = None  # "during" / "before" the prefetch: when every rank writes the second request


def read_setup(tokens: Sequence[str], rank: int, world_size: int) -> Setup:
    failing, missing, short, second = None, False, False, None
    for token in tokens:
        found = _SETUP.match(token)
        if found is None:
            raise ConfigError("setup token", token, "fail<rank>.<load>, miss<rank>, room<rank> or room<rank>p")
        owner = int(found["fail"] or found["miss"] or found["room"])
        if owner >= world_size:
            raise ConfigError("setup token", token, f"a rank below {world_size}")
        if found["room"] is not None:
            second = "before" if found["early"] else "during"
        if owner != rank:
            continue
        if found["fail"] is not None:
            failing = int(found["load"])
            if failing < 1:
                raise ConfigError("setup token", token, "a load number from 1")
        elif found["miss"] is not None:
            missing = True
        else:
            short = True
    return Setup(failing, missing, short, second)


# --- schedules ---------------------------------------------------------------------------------


def format_schedule(setup: Sequence[str], actions: Sequence[str]) -> str:
    return ",".join([*setup, *actions])


def parse_schedule(text: str, world_size: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(setup tokens, actions) of a schedule string; one error line naming the first bad token."""
    tokens = [t.strip() for t in text.split(",")] if text.strip() else []
    setup: list[str] = []
    actions: list[str] = []
    for index, token in enumerate(tokens):
        if _SETUP.match(token):
            if actions:
                raise ConfigError(f"schedule[{index}]", token, "setup tokens before every action")
            read_setup([token], 0, world_size)
            setup.append(token)
            continue
        if _LOCAL.match(token) or _CHECK.match(token):
            ranks = [int(r) for r in re.findall(r"\d+", token)]
            if any(r >= world_size for r in ranks):
                raise ConfigError(f"schedule[{index}]", token, f"ranks below {world_size}")
            actions.append(token)
            continue
        raise ConfigError(f"schedule[{index}]", token, "io<r>, tick<r>, abort<r>, check, check:io<r>, or a setup token")
    return tuple(setup), tuple(actions)


def local_action(token: str) -> tuple[str, int] | None:
    """(kind, rank) of a rank-local action; None for a check."""
    found = _LOCAL.match(token)
    return (found["kind"], int(found["rank"])) if found else None


def window_ranks(token: str) -> list[int]:
    """The ranks whose held transfer goes through between their vote and their terminate in this check."""
    found = _CHECK.match(token)
    if found is None:
        raise ConfigError("check", token, "check or check:io<r>...")
    return [int(r) for r in re.findall(r"\d+", found.group(1))]


# --- what each rank reports, and what the state enables ----------------------------------------


@dataclass(frozen=True)
class LocalView:
    """One rank at one point of a schedule: what it could do, and its state (all that a later action depends on)."""

    parked: bool  # a transfer of the request is held: io<r> can let it through
    tracked: bool  # the rank still tracks the request, unfinished
    released: int  # transfers let through so far
    io_done: bool
    ticks: int
    aborted: bool
    finished: int | None  # tokens committed, once the rank ended the request

    def state(self) -> tuple:
        return (self.released, self.io_done, self.ticks, self.aborted, self.finished)


@dataclass(frozen=True)
class Segment:
    """The actions since the last check (or the start)."""

    actions: tuple[str, ...] = ()

    def ranks(self) -> list[int]:
        return [owner for token in self.actions if (owner := _owner(token)) is not None]

    def words(self, world_size: int) -> list[list[str]]:
        """Each rank's own actions in this segment, in order."""
        out: list[list[str]] = [[] for _ in range(world_size)]
        for token in self.actions:
            parsed = local_action(token)
            if parsed is not None:
                out[parsed[1]].append(parsed[0])
        return out


def _owner(token: str) -> int | None:
    parsed = local_action(token)
    return parsed[1] if parsed else None


def global_state(scenario: CrossRankScenario, views: Sequence[LocalView], checks: int) -> tuple:
    """The state every later action depends on: each rank's local state, and whether a check has run (a timer may
    start there), or how many under a bound on them."""
    return (checks if scenario.checks is not None else checks > 0, tuple(v.state() for v in views))


def enabled(scenario: CrossRankScenario, views: Sequence[LocalView], segment: Segment, checks: int,
            ticks: Sequence[int], aborts: int) -> tuple[str, ...]:
    """The actions the explorer may take next, in the order it tries them (the first completes a schedule).

    Nothing once no rank tracks the request, or the bound on checks is
    reached (the explored part is over).
    Local actions of rank r only after those of lower ranks in the same
    segment (partial-order reduction); a tick first among its rank's own, and
    only once a check ran (an ACK drain starts its timer there; under a
    vote per check the timer ran from the start, which a check at the start
    then covers); a check after at least one action, or at the start.
    """
    if not any(v.tracked for v in views) or scenario.checks is not None and checks >= scenario.checks:
        return ()
    owners = segment.ranks()
    last = max(owners, default=-1)
    out: list[str] = []
    for rank, view in enumerate(views):
        if rank < last:
            continue
        acted = rank in owners
        if scenario.ticks and checks and view.tracked and ticks[rank] < scenario.ticks and not acted:
            out.append(f"tick{rank}")
        if view.parked:
            out.append(f"io{rank}")
        if aborts < scenario.aborts and view.tracked and not view.aborted:
            out.append(f"abort{rank}")
    if segment.actions or not checks:
        out.append(CHECK)
        if scenario.window and scenario.policy == "timeout":
            eligible = [r for r, v in enumerate(views) if v.parked and v.tracked and ticks[r]]
            for size in range(1, len(eligible) + 1):
                for chosen in itertools.combinations(eligible, size):
                    out.append(CHECK + "".join(f":io{r}" for r in chosen))
    return tuple(out)


def interleavings(segment: Segment, world_size: int) -> int:
    """How many schedules without the reduction this segment stands for: its ranks' words interleaved, and each
    tick anywhere among its own rank's loads before an abort (the orders the reduction takes as one)."""
    words = segment.words(world_size)
    count = math.factorial(sum(len(w) for w in words))
    for word in words:
        count //= math.factorial(len(word))
        if word and word[0] == "tick":
            rest = word[1:]
            before_abort = rest.index("abort") if "abort" in rest else len(rest)
            count *= before_abort + 1
    return count
