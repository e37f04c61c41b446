"""A mutation campaign: plan the mutants of each implementation, check the suite passes unmutated, run each mutant.

Planning reads each `--cache-impl` factory (conformance.implementations.loader, as the
suite does), discovers its protocol functions and builds the catalogue's
mutants; selection, limits and equivalence claims are checked against
them before anything runs. Running first runs the suite on the unmutated
implementation (a campaign against a suite that already fails measures
nothing), then each mutant in id order, one suite run each.
"""

from __future__ import annotations

import fnmatch
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

from conformance.errors import ConformanceError
from conformance.implementations.loader import check_adapter, load_factory
from conformance.mutants.catalogue import Mutant, mutants_of
from conformance.mutants.discovery import adapter_targets
from conformance.mutants.runner import KILLED, SURVIVED, RunOutcome, SuiteOptions, run_suite
from spec.errors import ConfigError

# Without --timeout: a mutant's run may take this many times the unmutated run, plus a margin for start-up.
TIMEOUT_FACTOR, TIMEOUT_MARGIN_S, TIMEOUT_FLOOR_S = 3.0, 30.0, 60.0
BASELINE_LIMIT_S = 3600.0  # the unmutated run, without --timeout: every wait in the suite is bounded, this bounds the rest


class BaselineError(ConformanceError, RuntimeError):
    """The suite fails on the unmutated implementation: no mutant can be judged against it."""


@dataclass(frozen=True)
class ImplPlan:
    spec: str  # the --cache-impl value
    adapter: str  # the adapter's name
    mutants: tuple[Mutant, ...]  # selected, in id order
    generated: int  # before selection
    functions: int  # protocol functions discovered


@dataclass(frozen=True)
class MutantResult:
    impl: str
    mutant: Mutant
    outcome: RunOutcome
    equivalent: str | None  # the argument it cannot be observed: the catalogue's pattern, or --equivalent
    no_clause: str | None = None  # --breaks-no-clause: why the cache stays safe and live under it

    @property
    def status(self) -> str:
        return self.outcome.status

    @property
    def names_expected(self) -> bool:
        if self.no_clause:  # a kill is right to name none; one naming a clause says the argument is wrong
            return self.status == KILLED and not self.outcome.clauses
        return bool(set(self.outcome.clauses) & set(self.mutant.expected))


@dataclass
class ImplRun:
    plan: ImplPlan
    baseline_s: float
    timeout_s: float
    results: list[MutantResult] = field(default_factory=list)


def plan_campaign(specs: Sequence[str], *, select: Sequence[str] = (), limit: int | None = None,
                  equivalent: Mapping[str, str] | None = None, no_clause: Mapping[str, str] | None = None) -> list[ImplPlan]:
    plans = []
    for spec in specs:
        adapter = check_adapter(load_factory(spec)(), spec)
        try:
            targets = adapter_targets(adapter, spec.partition(":")[0])
        except ConfigError:
            raise  # already one line naming the field
        except Exception as exc:  # building the one instance discovery walks failed: the adapter's own error
            raise ConfigError("--cache-impl", spec, f"an adapter whose create() builds a CPU instance ({type(exc).__name__}: {exc})") from None
        mutants = mutants_of(targets)
        plans.append(ImplPlan(spec, adapter.name, tuple(mutants), len(mutants), len({(t.module, t.qualname) for t in targets})))
    every_id = {m.id for p in plans for m in p.mutants}
    for pattern in select:
        if not any(fnmatch.fnmatchcase(i, pattern) for i in every_id):
            raise ConfigError("--select", pattern, f"a mutant id or a glob over ids (see --list), e.g. {_example(plans)}")
    for option, argued in (("--equivalent", equivalent or {}), ("--breaks-no-clause", no_clause or {})):
        for mutant_id in argued:
            if mutant_id not in every_id:
                raise ConfigError(option, mutant_id, f"the id of a generated mutant (see --list), e.g. {_example(plans)}")
    selected = []
    for plan in plans:
        chosen = [m for m in plan.mutants if not select or any(fnmatch.fnmatchcase(m.id, p) for p in select)]
        selected.append(ImplPlan(plan.spec, plan.adapter, tuple(chosen[:limit] if limit else chosen), plan.generated, plan.functions))
    return selected


def _example(plans: Sequence[ImplPlan]) -> str:
    first = next((m.id for p in plans for m in p.mutants), None)
    return repr(first) if first else "none: no mutant was generated"


def equivalence(mutant: Mutant, claimed: Mapping[str, str]) -> str | None:
    """The argument that a mutant cannot be observed: the user's claim first, else the catalogue's pattern."""
    return claimed.get(mutant.id) or mutant.equivalent


def run_campaign(plans: Sequence[ImplPlan], *, jobs: str, keyword: str | None, timeout_s: float | None,
                 claimed: Mapping[str, str], report: Callable[[MutantResult, int, int], None],
                 started: Callable[[ImplPlan, float, float], None], no_clause: Mapping[str, str] | None = None) -> list[ImplRun]:
    """Run every plan; `started(plan, baseline_s, timeout_s)` once per plan, `report(result, index, total)` per mutant."""
    runs = []
    with tempfile.TemporaryDirectory(prefix="mutants-") as tmp:
        root = Path(tmp)
        if os.pathsep in str(root):
            raise ConfigError("TMPDIR", str(root), f"a temporary folder whose path has no {os.pathsep!r} (a run puts a folder in it on PYTHONPATH)")
        for number, plan in enumerate(plans):
            folder = root / f"impl{number}"  # no ':' or other path separators: the run puts it on PYTHONPATH
            baseline = run_suite(SuiteOptions(plan.spec, jobs, keyword, timeout_s or BASELINE_LIMIT_S), folder / "baseline")
            if baseline.status != SURVIVED:
                raise BaselineError(f"the suite fails on the unmutated {plan.adapter} ({plan.spec}): "
                                    f"{baseline.status}, {baseline.test or ''} {baseline.message or ''}".rstrip())
            limit = timeout_s or max(TIMEOUT_FLOOR_S, TIMEOUT_FACTOR * baseline.seconds + TIMEOUT_MARGIN_S)
            started(plan, baseline.seconds, limit)
            run = ImplRun(plan, baseline.seconds, limit)
            options = SuiteOptions(plan.spec, jobs, keyword, limit)
            for index, mutant in enumerate(plan.mutants):
                outcome = run_suite(options, folder / f"m{index:04d}", module=mutant.module, file=mutant.file, source=mutant.source)
                result = MutantResult(plan.adapter, mutant, outcome, equivalence(mutant, claimed), (no_clause or {}).get(mutant.id))
                run.results.append(result)
                report(result, index, len(plan.mutants))
            runs.append(run)
    return runs
