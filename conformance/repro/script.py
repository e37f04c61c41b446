"""The text of one reproduction script: a docstring a maintainer can paste, one replay function per target, main().

Written so that it reads as what it does: the calls into the implementation
are spelled out (scenario and schedule, the decision state, the storage error
injected), and the only imports are this package's public modules.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from conformance.scenarios.catalogue import Scenario
from conformance.repro.cases import Case

HEADER = '''#!/usr/bin/env python3
"""{clause} ({kind}: {title}) on {impls}.

{sentence}

{how}
Shown by {count} test(s) of the run, e.g. {example}.

Needs: pip install 'hicache-conformance[conformance]', and the implementation's own environment
       (SGLang's live classes: bash .ci/sglang-live-env VENV in hicache-conformance's repository).
Run:   python {filename} [--cache-impl MODULE:FACTORY | --sglang-live PATH | --sglang PATH] [--only NAME]
       (default: the implementation the run tested; the options replace where it comes from)
Exit:  1 the defect reproduces (the message names {clause}), 0 it is gone,
       2 the implementation could not be built, 3 the replay failed otherwise.

Written by `pytest --conformance-repro` ({suite}) from the run of {started}.
"""

{imports}
'''
# What each kind of replay needs besides sys and the runtime's main.
IMPORTS = {
    "exploration": ["from conformance.scenarios import catalogue, explore"],
    "crossrank": ["from conformance.multirank.explore import CrossRankScenario, replay as replay_on_ranks"],
    "decision": ["import math", "from conformance.report.decision_rows import describe_state", "from spec.config import TerminationConfig",
                 "from spec.decision import DecisionState",
                 "from spec.profiles import profile as find_profile", "from spec.timeout import timeout_budget",
                 "from spec.trace import EventKind"],
    "storage_error": ["from conformance.oracles import lifecycle", "from conformance.scenarios import workload", "from spec.trace import BACKUP, LOAD, EventKind"],
    "foreign_pages": ["from conformance.scenarios import workload", "from spec.config import TerminationConfig"],
}

EXPLORATION = '''

def {name}(make_cache):
    """Scenario {scenario_name}, schedule {schedule!r}: one prefetch, each IO step and scheduler step in this order."""
    scenario = catalogue.Scenario({scenario})
    explore.replay(make_cache, scenario, {schedule!r}, profile=make_cache.profile)
'''

CROSSRANK = '''

def {name}(make_cache):
    """Cross-rank scenario {scenario_name}, schedule {schedule!r}: real ranks, each one's setup and actions in this order."""
    scenario = CrossRankScenario.from_fields({fields!r})
    replay_on_ranks(make_cache.adapter, scenario, {schedule!r}, workdir=make_cache.storage_dir / "ranks")
'''

DECISION = '''

def {name}(make_cache):
    """One operation in this decision state ({where}); its can_terminate_prefetch must decide as its profile does."""
    fields = {state}
    state = DecisionState(**fields)
    described = f"{{describe_state(fields)}} ({where})"
    config = TerminationConfig(policy=state.policy, page_size=state.page_size)
    cache = make_cache(termination=config)
    budget = timeout_budget(config, state.hit_pages)
    start = make_cache.clock.now() - {offset}
    mark = len(make_cache.trace.events())
    decided = bool(cache.can_terminate(cache.make_operation(state, start_time=start)))
    votes = [e for e in make_cache.trace.events()[mark:] if e.kind is EventKind.VOTE]
    profile = find_profile(make_cache.profile)
    want = profile.decide([state])[0]
    assert decided == want, f"{clause}: {{described}}: decided {{'terminate' if decided else 'wait'}}, its profile ({{profile.id}}) {{'terminate' if want else 'wait'}}"
    if votes:
        assert bool(votes[-1].value) == profile.vote(state), f"{clause}: {{described}}: voted {{bool(votes[-1].value)}}, its profile {{profile.vote(state)}}"
'''

STORAGE_ERROR = '''

def {name}(make_cache):
    """The first {pool} transfer {direction_words} raises, as a storage error would; the cache must go on working."""
    cache = make_cache(policy="wait_complete", batch_pages=2, wait_timeout_s=5.0)  # a dead thread's wait ends soon
    tokens = workload.request_tokens(11, 4 * make_cache.page_size)
    data = workload.request_data(cache, tokens, 11)
    make_cache.gate.fail("storage raises at the first {pool} transfer {direction_words}",
                         lambda e: e.kind is EventKind.IO_START and e.value == {direction} and e.pool == {pool!r})
    {body}
    failed = lifecycle.background_errors(cache)
    assert not failed, "L5: a storage error ended a background thread of the cache: " + "; ".join(failed)
'''

FOREIGN_PAGES = '''

def {name}(make_cache):
    """A writer stores 4 pages and closes; a reader whose KV pages differ only in {differs} shares its storage: it must find a miss."""
    shared = make_cache.storage_dir / "shared"
    writer = make_cache(termination=TerminationConfig(policy="wait_complete", page_size=make_cache.page_size), storage_dir=shared{writer})
    tokens = workload.request_tokens(61, 4 * make_cache.page_size)
    workload.store(writer, tokens, workload.request_data(writer, tokens, 61))
    writer.close()
    reader = make_cache(storage_dir=shared, {reader})
    served = 0
    if reader.prefetch("r1", tokens):
        reader.wait_prefetch_io("r1")
        workload.drive(reader, ["r1"], max_steps=3, trace=make_cache.trace)
        served = reader.load_back(tokens).tokens
    assert served == 0, f"S6: a cache whose KV pages differ from the writer's only in {differs} served {{served}} tokens from the writer's pages"
'''
# How the writer and the reader differ (conformance/suite/test_foreign_pages.py's).
WRITERS = {"dtype_same_width": ', kv_format="dtype"'}
READERS = {"dtype": 'termination=TerminationConfig(policy="wait_complete", page_size=make_cache.page_size), kv_format="dtype"',
           "dtype_same_width": 'termination=TerminationConfig(policy="wait_complete", page_size=make_cache.page_size), kv_format="dtype_same_width"',
           "model": 'termination=TerminationConfig(policy="wait_complete", page_size=make_cache.page_size), kv_format="model"',
           "layout": 'termination=TerminationConfig(policy="wait_complete", page_size=make_cache.page_size), kv_format="layout"',
           "page_size": 'termination=TerminationConfig(policy="wait_complete", page_size=2 * make_cache.page_size)'}

LOAD_BODY = '''workload.store(cache, tokens, data)
    assert cache.prefetch("r1", tokens), "the stored request was not prefetched"
    cache.wait_prefetch_io("r1")
    workload.drive(cache, ["r1"], max_steps=3, trace=make_cache.trace)'''
BACKUP_BODY = '''cache.write(tokens, data)
    try:
        cache.flush()
    except AssertionError:
        pass  # a backup that never finished: what ended it is checked below'''

FOOTER = '''

TARGETS = [
{targets}
]

if __name__ == "__main__":
    sys.exit(main({clause!r}, TARGETS, sys.argv[1:], __doc__))
'''

BACKSLASH, QUOTES = chr(92), chr(34) * 3
# Placements of a decision state on the injected clock (conformance/suite/test_decision.py's): how long before now it started.
OFFSETS = {"just started": "0.0", "one tick before the deadline": "math.nextafter(budget, -math.inf)", "exactly at the deadline": "budget", "a second past the deadline": "(budget + 1.0)",
           "one tick past the deadline": "math.nextafter(budget, math.inf)"}


def _function(index: int, case: Case, clause: str) -> tuple[str, str]:
    name = f"replay_{index}"
    if case.kind == "exploration":
        scenario = dict(case.fields["scenario"])
        if scenario.get("extra_pools") is not None:
            scenario["extra_pools"] = tuple(scenario["extra_pools"])
        defaults = {f.name: f.default for f in dataclasses.fields(Scenario) if f.default is not dataclasses.MISSING}
        arguments = ", ".join(f"{k}={v!r}" for k, v in scenario.items() if k not in defaults or defaults[k] != v)
        return name, EXPLORATION.format(name=name, scenario=arguments, scenario_name=scenario["name"], schedule=case.fields["schedule"])
    if case.kind == "crossrank":
        fields = dict(case.fields["scenario"])
        return name, CROSSRANK.format(name=name, fields=fields, scenario_name=fields["name"], schedule=case.fields["schedule"])
    if case.kind == "decision":
        row = case.fields["row"]
        return name, DECISION.format(name=name, state=repr(row["state"]), where=row["where"], offset=OFFSETS.get(row["where"], "0.0"), clause=clause)
    if case.kind == "foreign_pages":
        differs = case.fields["differs"]
        return name, FOREIGN_PAGES.format(name=name, differs=differs, reader=READERS[differs], writer=WRITERS.get(differs, ""))
    load = case.fields["direction"] == "storage_to_host"
    return name, STORAGE_ERROR.format(name=name, pool=case.fields["pool"], direction="LOAD" if load else "BACKUP",
                                      direction_words="from storage" if load else "to storage", body=LOAD_BODY if load else BACKUP_BODY)


def how(cases: Mapping[str, Case]) -> str:
    lines = []
    for impl, case in cases.items():
        if case.kind == "exploration":
            lines.append(f"On {impl}: replays scenario {case.fields['scenario']['name']}, schedule '{case.fields['schedule']}'"
                         + (f" (shrunk from '{case.fields['found']}')" if case.fields.get("found") not in (None, case.fields["schedule"]) else "") + ".")
        elif case.kind == "crossrank":
            lines.append(f"On {impl}: replays cross-rank scenario {case.fields['scenario']['name']} on "
                         f"{case.fields['scenario']['world_size']} ranks, schedule '{case.fields['schedule']}'.")
        elif case.kind == "decision":
            lines.append(f"On {impl}: places the decision state of the table row '{case.fields['row']['clause']}' ({case.fields['row']['where']}) in one operation.")
        elif case.kind == "foreign_pages":
            lines.append(f"On {impl}: a reader whose pages differ only in {case.fields['differs']} reads a writer's shared storage.")
        else:
            lines.append(f"On {impl}: raises a storage error at the first {case.fields['pool']} transfer ({case.fields['direction']}).")
    return "\n".join(lines)


def _docstring(text: str) -> str:
    """Text safe inside the script's triple-quoted docstring."""
    return str(text).replace(BACKSLASH, BACKSLASH * 2).replace(QUOTES, chr(39) * 3)


def render(entry: Mapping[str, Any], cases: Mapping[str, Case], sources: Mapping[str, Mapping[str, str]], meta: Mapping[str, str], filename: str) -> str:
    clause = entry["clause"]
    tests = entry["tests"]
    wanted = {"import sys", "from conformance.repro.runtime import main"}
    for case in cases.values():
        wanted.update(IMPORTS[case.kind])
    plain = sorted(w for w in wanted if w.startswith("import "))
    imports = "\n".join(plain) + "\n\n" + "\n".join(sorted(w for w in wanted if w.startswith("from ")))
    header = HEADER.format(
        imports=imports, clause=clause, kind=entry["kind"], title=entry["title"], impls=", ".join(entry["implementations"]),
        sentence=_docstring(entry["sentence"]), how=_docstring(how(cases)), count=len(tests), example=tests[0]["nodeid"] if tests else "(none)",
        filename=filename, suite=meta.get("suite", ""), started=meta.get("started", ""))
    functions, targets = [], []
    for index, (impl, case) in enumerate(cases.items(), start=1):
        name, text = _function(index, case, clause)
        functions.append(text)
        targets.append(f"    ({impl!r}, {dict(sources[impl])!r}, {name}),")
    return header + "".join(functions) + FOOTER.format(targets="\n".join(targets), clause=clause)


def file_name(entry: Mapping[str, Any]) -> str:
    return f"repro_{entry['id'].replace('-', '_').lower()}.py"
