"""The harness's parts on their own: device params and pinning, expected-failure files, the matrix rules,
capability skips, and the adapter example in conformance/ADAPTERS.md."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from caches.adapters import hiradix
from conformance.implementations import devices
from conformance.adapter import CacheEnv
from conformance.implementations.capabilities import UnknownCapability, require
from conformance.plugin.expectations import ExpectedFailure, Expectations, collect, load_file, parse_entry
from conformance.implementations.loader import check_adapter
from conformance.scenarios.workload import pool_data
from conformance.report.failures import named_clauses
from conformance.report.matrix import (OutcomeRecord, build_matrix, clause_status, devices_not_run, failing_here, item_properties,
                                read_properties, skip_groups)
from spec.clock import ManualClock
from spec.config import TerminationConfig
from spec.errors import ConfigError
from spec.trace import TraceRecorder

ADAPTERS_MD = Path(__file__).resolve().parents[2] / "conformance" / "ADAPTERS.md"


# --- devices -------------------------------------------------------------------------------------

@pytest.mark.parametrize("caller, index, detected, pinned", [
    ("0,1,2,3", 5, None, "1"),
    ("GPU-aaaa, GPU-bbbb", 2, None, "GPU-aaaa"),  # entries kept verbatim (UUIDs, MIG ids)
    ("7", 3, None, "7"),
    ("", 1, 8, ""),  # a caller that hid every GPU keeps them hidden
    (None, 6, 4, "2"),  # unset: every detected GPU is the list
    (None, 0, 0, None),  # nothing known: leave the variable alone
    (None, 0, None, None),
])
def test_worker_keeps_one_entry_of_the_callers_list(caller, index, detected, pinned):
    assert devices.pinned_entry(caller, index, detected) == pinned


def test_pin_worker_gpu_sets_the_variable_from_the_worker_id():
    environ = {devices.CUDA_ENV: "4,5,6"}
    assert devices.pin_worker_gpu("gw4", environ) == "5"
    assert environ == {devices.CUDA_ENV: "5"}


def test_pin_worker_gpu_without_a_list_uses_the_detected_count():
    environ: dict[str, str] = {}
    count = devices.count_gpus_without_cuda()
    pinned = devices.pin_worker_gpu("gw1", environ)
    assert pinned == devices.pinned_entry(None, 1, count)
    assert environ.get(devices.CUDA_ENV) == pinned


@pytest.mark.parametrize("bad", ["main", "gw", "gwx", "1"])
def test_worker_index_rejects_other_ids(bad):
    with pytest.raises(ValueError, match="worker id"):
        devices.worker_index(bad)


def test_device_params_per_mode():
    assert [p.id for p in devices.device_params(False, 2)] == ["cpu", "cuda:0", "cuda:1"]
    assert [p.id for p in devices.device_params(True, 1)] == ["cpu", "cuda"]
    # No GPU: no GPU params at all (no phantom items); the matrix still shows the column, not run (Harness.device_ids).
    assert [p.id for p in devices.device_params(True, 0)] == ["cpu"] == [p.id for p in devices.device_params(False, 0)]
    assert devices.torch_device("cuda") == "cuda:0" and devices.torch_device("cuda:3") == "cuda:3"


def test_free_port_can_be_bound():
    port = devices.free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))
    assert 0 < port < 65536


# --- expected failures ---------------------------------------------------------------------------

def test_entry_needs_a_reason():
    with pytest.raises(ConfigError, match="reason"):
        parse_entry({"test": "test_x"}, default_impl="a", source="f.toml")
    with pytest.raises(ConfigError, match="reason"):
        parse_entry({"test": "test_x", "reason": "  "}, default_impl="a", source="f.toml")


@pytest.mark.parametrize("raw, field", [
    ({"test": "test_x", "reason": "r", "why": "?"}, "keys"),
    ({"test": "test_x", "reason": "r", "clause": "Q7"}, "clause"),
    ({"test": "test_x[cpu", "reason": "r"}, "test"),
    ({"test": "", "reason": "r"}, "test"),
])
def test_bad_entries_name_the_field(raw, field):
    with pytest.raises(ConfigError, match=field) as info:
        parse_entry(raw, default_impl="a", source="f.toml")
    assert "\n" not in str(info.value)


def test_bad_toml_is_one_line(tmp_path):
    path = tmp_path / "a.toml"
    path.write_text("[[xfail]\ntest = 1\n")
    with pytest.raises(ConfigError, match="valid TOML") as info:
        load_file(path)
    assert "\n" not in str(info.value)


def test_without_a_toml_parser_comment_only_files_still_load(tmp_path, monkeypatch):
    from conformance.plugin import expectations

    monkeypatch.setattr(expectations, "_toml", None)  # Python 3.10 without tomli
    comments = tmp_path / "a.toml"
    comments.write_text("# nothing expected to fail\n\n")
    assert load_file(comments) == []
    entries = tmp_path / "b.toml"
    entries.write_text('[[xfail]]\ntest = "test_a"\nreason = "r"\n')
    with pytest.raises(ConfigError, match="tomli"):
        load_file(entries)


def test_impl_defaults_to_the_file_stem(tmp_path):
    path = tmp_path / "mycache.toml"
    path.write_text('[[xfail]]\ntest = "test_a"\nreason = "r"\n\n[[xfail]]\nimpl = "other"\ntest = "test_b"\nreason = "r"\n')
    assert [(e.impl, e.test) for e in load_file(path)] == [("mycache", "test_a"), ("other", "test_b")]


def entry(test: str, clause: str | None = None, impl: str = "a") -> ExpectedFailure:
    return ExpectedFailure(impl=impl, test=test, reason="r", clause=clause, source="s")


@pytest.mark.parametrize("pattern, clause, name, item, clauses, matches", [
    ("test_x", None, "test_x", "test_x[a-cpu-timeout]", ["S1"], True),
    ("test_x", None, "test_xy", "test_xy[a-cpu]", ["S1"], False),
    ("test_x*", None, "test_xy", "test_xy[a-cpu]", ["S1"], True),
    ("test_x[*-timeout]", None, "test_x", "test_x[a-cpu-timeout]", [], True),
    ("test_x[*-timeout]", None, "test_x", "test_x[a-cpu-best_effort]", [], False),
    ("test_x[*-timeout]", None, "test_x", "test_x", [], False),
    ("test_x", "F3", "test_x", "test_x[a-cpu]", ["S1", "F3"], True),
    ("test_x", "F3", "test_x", "test_x[a-cpu]", ["S1"], False),
])
def test_matching(pattern, clause, name, item, clauses, matches):
    expectations = Expectations([entry(pattern, clause)])
    assert (expectations.find("a", name, item, clauses) is not None) is matches
    assert bool(expectations.matched) is matches


def test_every_matching_entry_counts_and_the_rest_are_stale():
    first, second, stale, other_impl = entry("test_x"), entry("test_x[*cpu*]"), entry("test_gone"), entry("test_x", impl="b")
    expectations = Expectations([first, second, stale, other_impl])
    assert expectations.find("a", "test_x", "test_x[a-cpu]", []) is first
    rows, stale_rows = expectations.report(expectations.matched)
    assert [r["matched"] for r in rows] == [True, True, False, False]
    assert stale_rows == [{"impl": "a", "test": "test_gone", "reason": "r", "matched": False},
                          {"impl": "b", "test": "test_x", "reason": "r", "matched": False}]


class ThirdPartyAdapter:
    """Only what expected-failure collection reads: a name and, optionally, the attribute."""

    def __init__(self, name, expected_failures=None):
        self.name = name
        if expected_failures is not None:
            self.expected_failures = expected_failures


def test_collect_keeps_entries_of_adapters_under_test(tmp_path):
    (tmp_path / "a.toml").write_text('[[xfail]]\ntest = "test_shipped"\nreason = "r"\n')
    extra = tmp_path / "extra.toml"
    extra.write_text('[[xfail]]\nimpl = "a"\ntest = "test_cli"\nreason = "r"\n\n[[xfail]]\nimpl = "zz"\ntest = "test_x"\nreason = "r"\n')
    adapters = [ThirdPartyAdapter("a", [{"test": "test_attr", "reason": "r"}]), ThirdPartyAdapter("b")]
    entries = collect(adapters, [extra], builtin_dir=tmp_path)
    assert [(e.impl, e.test) for e in entries] == [("a", "test_shipped"), ("a", "test_attr"), ("a", "test_cli")]
    with pytest.raises(ConfigError, match="expected_failures"):
        collect([ThirdPartyAdapter("a", "test_x")], [], builtin_dir=tmp_path)


def test_shipped_files_parse():
    from conformance.plugin.expectations import BUILTIN_DIR

    files = sorted(BUILTIN_DIR.glob("*.toml"))
    assert files
    for path in files:
        assert all(e.reason for e in load_file(path))


# --- matrix rules --------------------------------------------------------------------------------

def test_clause_status_precedence():
    assert clause_status(["pass", "skip", "fail-other", "fail", "xfail"]) == "fail"
    assert clause_status(["pass", "skip", "fail-other", "xfail"]) == "fail-other"
    assert clause_status(["skip", "xfail", "pass"]) == "xfail"  # pass only if every citing test that ran passed
    assert clause_status(["skip", "pass", "pass"]) == "pass"  # a skipped test did not run
    assert clause_status(["skip", "xfail"]) == "xfail"
    assert clause_status(["skip"]) == "skip"
    assert clause_status([]) == "uncovered"


def test_build_matrix_counts_device_free_tests_everywhere():
    records = [
        OutcomeRecord("t1", "a", "cpu", ["S1"], "pass"),
        OutcomeRecord("t2", "a", "cuda", ["S1"], "skip"),
        OutcomeRecord("t3", "a", "any", ["C1"], "fail", {"C1": "C1: rejected"}),
        OutcomeRecord("t4", "a", "cuda:1", ["S2"], "xfail"),  # a device not among the columns adds one
    ]
    matrix, uncovered = build_matrix(records, {"a": ["cpu", "cuda"], "b": ["cpu"]}, ["C1", "S1", "S2"])
    assert matrix == {
        "a": {"cpu": {"C1": "fail", "S1": "pass", "S2": "uncovered"},
              "cuda": {"C1": "fail", "S1": "skip", "S2": "uncovered"},
              "cuda:1": {"C1": "fail", "S1": "uncovered", "S2": "xfail"}},
        "b": {"cpu": {"C1": "uncovered", "S1": "uncovered", "S2": "uncovered"}},
    }
    assert uncovered["a"]["cpu"] == ["S2"] and uncovered["b"]["cpu"] == ["C1", "S1", "S2"]


def test_a_failure_fails_what_it_names_and_only_marks_what_it_cites():
    records = [
        OutcomeRecord("t1", "a", "cpu", ["S1", "X1"], "fail", {"D5": "D5: voted no"}),  # names a clause it does not cite
        OutcomeRecord("t2", "a", "cpu", ["S1"], "pass"),
        OutcomeRecord("t3", "a", "cpu", ["F8"], "fail"),  # named nothing (a hang, a crash)
    ]
    matrix, _ = build_matrix(records, {"a": ["cpu"]}, ["D5", "S1", "X1", "F8"])
    assert matrix["a"]["cpu"] == {"D5": "fail", "S1": "fail-other", "X1": "fail-other", "F8": "fail-other"}
    failing = failing_here(records, {"a": ["cpu"]})["a"]["cpu"]
    assert failing == {"clauses": {"D5": "D5: voted no"}, "naming_no_clause": ["t3"], "weak": []}


def test_weak_tests_colour_no_cell_and_fail_apart():
    records = [
        OutcomeRecord("t1", "a", "cpu", [], "fail", {"S1": "S1: said by a weak test"}, weak="plumbing"),
        OutcomeRecord("t2", "a", "cpu", ["S1"], "skip"),
    ]
    matrix, _ = build_matrix(records, {"a": ["cpu"]}, ["S1"])
    assert matrix["a"]["cpu"] == {"S1": "skip"}
    assert failing_here(records, {"a": ["cpu"]})["a"]["cpu"] == {"clauses": {}, "naming_no_clause": [], "weak": ["t1"]}


def test_a_gpu_column_no_test_ran_on_is_not_run_never_pass():
    no_gpu = "no CUDA device visible"
    records = [
        OutcomeRecord("t1", "a", "cpu", ["S1"], "pass"),
        OutcomeRecord("t2", "a", "cuda", ["S1"], "skip", device_not_run=no_gpu),
        OutcomeRecord("t3", "a", "any", ["C1"], "pass"),  # device-free: counts only where the device ran
        OutcomeRecord("t4", "a", "cuda:1", ["S1"], "skip", skip_reason="capability"),  # the device ran; the test skipped
    ]
    columns = ["cpu", "cuda", "cuda:1", "cuda:2"]
    not_run = devices_not_run(records, columns, {"cuda:2": "hidden"})
    assert not_run == {"cuda": no_gpu, "cuda:2": "hidden"}
    assert devices_not_run(records[:1], ["cpu", "cuda"]) == {"cuda": "no test ran on this device in this run"}
    matrix, uncovered = build_matrix(records, {"a": columns}, ["C1", "S1", "S2"], not_run)
    assert matrix["a"] == {"cpu": {"C1": "pass", "S1": "pass", "S2": "uncovered"},
                           "cuda": {"C1": "not-run", "S1": "not-run", "S2": "uncovered"},
                           "cuda:1": {"C1": "pass", "S1": "skip", "S2": "uncovered"},
                           # No item ran there at all: what the implementation's tests cite anywhere did not run there.
                           "cuda:2": {"C1": "not-run", "S1": "not-run", "S2": "uncovered"}}
    assert uncovered["a"]["cuda"] == ["S2"]


def test_skips_are_grouped_by_reason():
    records = [OutcomeRecord(f"t{i}", impl, "cpu", ["S1"], "skip", skip_reason=why)
               for i, (impl, why) in enumerate([("a", "no mamba"), ("b", "no mamba"), ("a", "no mamba"), ("a", "no gpu")])]
    assert skip_groups([*records, OutcomeRecord("p", "a", "cpu", ["S1"], "pass")]) == [
        {"reason": "no mamba", "count": 3, "impls": {"a": 2, "b": 1}}, {"reason": "no gpu", "count": 1, "impls": {"a": 1}}]


@pytest.mark.parametrize("message, named", [
    ("D3: stopped waiting while the indexer get ran", ["D3"]),
    ("spec violations:\nD5: voted False where ...\nL2: voted no 3s after start", ["D5", "L2"]),
    ("X1/S4: at cache 0 check 1, ranks decided r1 differently", ["X1", "S4"]),
    ("rank 0: F8: cache 0 host:kv: 16 of 128 slots still allocated", ["F8"]),
    ("assert {'r1': 0} == {}\nmulti-rank run stuck: rank 1 hung", []),  # no label: names nothing
    ("Z9: not a clause; terminated before the deadline (D5)", []),  # unknown ids and parenthesised mentions do not count
    ('rank 1 failed: Traceback (most recent call last):\n  File "x.py", line 3, in f\n    raise E(f"X3: {v}")\nE: L1: wait never ended', ["L1"]),
])
def test_failure_messages_name_clauses_by_their_label(message, named):
    assert list(named_clauses(message)) == named


def test_properties_survive_serialisation_as_lists():
    props = [list(pair) for pair in item_properties("a", "cuda", ["S1", "F3"])] + [["other", 1]]
    assert read_properties(props) == ("a", "cuda", ["S1", "F3"])
    assert read_properties([["other", 1]]) is None


# --- capabilities --------------------------------------------------------------------------------

def test_require_skips_naming_adapter_and_capability():
    adapter = hiradix()  # declares pool:indexer, not pool:mamba
    require(adapter, "pool:indexer")
    with pytest.raises(pytest.skip.Exception, match="adapter 'hiradix' does not declare capability pool:mamba"):
        require(adapter, "pool:indexer", "pool:mamba")
    with pytest.raises(UnknownCapability, match="pool:nonsense"):
        require(adapter, "pool:nonsense")


# --- the documented example ----------------------------------------------------------------------

def test_adapters_md_example_is_a_working_adapter(tmp_path, cache_factory):
    text = ADAPTERS_MD.read_text()
    start = text.index("```python\n# minimal_cache.py") + len("```python\n")
    source = text[start:text.index("```", start)]
    namespace: dict = {}
    exec(compile(source, str(ADAPTERS_MD), "exec"), namespace)
    adapter = check_adapter(namespace["make_adapter"](), "ADAPTERS.md example")
    clock = ManualClock(0.0)
    env = CacheEnv(device="cpu", termination=TerminationConfig(policy="wait_complete", page_size=4),
                   storage_dir=tmp_path / "storage", clock=clock, trace=TraceRecorder(clock), extra_pools=adapter.default_extra_pools)
    cache = cache_factory.adopt(adapter.create(env))
    tokens = list(range(1, 9))
    cache.write(tokens, pool_data(cache.pools.values(), len(tokens), 0))
    cache.flush()
    assert cache.match(tokens) == (8, 0)


def test_matrix_recorder_sums_explored_interleavings_per_implementation():
    from _pytest.reports import TestReport

    from conformance.plugin.recorder import MatrixRecorder
    from conformance.report.matrix import INTERLEAVINGS_KEY, item_properties

    recorder = MatrixRecorder(harness=None)

    def report(nodeid, impl, count, when="call"):
        props = [*item_properties(impl, "cpu", ["S1"]), (INTERLEAVINGS_KEY, count)]
        return TestReport(nodeid, ("f.py", 1, nodeid), {}, "passed", None, when, user_properties=props)

    for rep in (report("t1", "a", 8), report("t2", "a", 52), report("t3", "b", 16), report("t3", "b", 16, when="teardown")):
        recorder.pytest_runtest_logreport(rep)
    assert recorder.interleavings == {"a": 60, "b": 16}


# --- adapters from a checkout (--sglang) ----------------------------------------------------------

def test_checkout_adapters_come_from_the_entry_point_or_a_named_factory(monkeypatch):
    from conformance.implementations import loader

    monkeypatch.setattr(loader, "entry_points", lambda group: [])
    with pytest.raises(ConfigError, match=r"'sglang' entry point in hicache_conformance.checkout_adapters \(reinstall hicache-conformance\), or name the factory with --sglang-shim"):
        loader.load_checkout_adapters("sglang", "/some/checkout")
    checkout = Path(__file__).resolve().parents[1] / "sglang_checkouts" / "fixed"
    adapters, missing = loader.load_checkout_adapters("sglang", str(checkout), "caches.upstream_decision:sglang_adapters")
    assert [a.name for a in adapters] == ["sglang:hiradix", "sglang:unified_radix", "sglang:hi_mamba_radix"] and missing == []
    with pytest.raises(ConfigError, match=r"invalid --sglang-shim: 'caches.adapters:no_such_factory' \(accepted: a callable named"):
        loader.load_checkout_adapters("sglang", str(checkout), "caches.adapters:no_such_factory")
    with pytest.raises(ConfigError, match=r"invalid builtins:str: 'str' \(accepted: a factory returning \(adapters, \[\(name, why missing\)\]\)\)"):
        loader.load_checkout_adapters("sglang", str(checkout), "builtins:str")


def test_pyproject_registers_the_sglang_shim():
    from conformance.plugin.expectations import _toml

    if _toml is None:
        pytest.skip("no TOML reader (Python < 3.11 without tomli)")
    data = _toml.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    assert data["project"]["entry-points"]["hicache_conformance.checkout_adapters"] == {"sglang": "caches.upstream_decision:sglang_adapters"}
