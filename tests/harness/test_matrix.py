"""The conformance matrix and report, end to end: a tiny suite against two real adapters.

Two adapters wrap the built-in hiradix cache: "good" as is, "broken" with a
load-back that returns zeros. The generated suite is run once in one process
and once under `-n 2`; both must produce the same report, valid under
conformance/report/schema.json. CUDA_VISIBLE_DEVICES is emptied for the runs,
so the GPU params skip on any machine and the cuda rows must read not-run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import jsonschema
import pytest

from conformance.report.terminal import LETTERS
from spec.clauses import CATALOGUE

ADAPTERS = '''
import torch
from caches.adapters import hiradix


class CorruptingSession:
    """A real cache whose load-back hands back zeros instead of the stored bytes."""

    def __init__(self, session):
        self._session = session

    def __getattr__(self, name):
        return getattr(self._session, name)

    def load_back(self, tokens):
        loaded = self._session.load_back(tokens)
        return type(loaded)(tokens=loaded.tokens, data={k: torch.zeros_like(v) for k, v in loaded.data.items()})


class Wrapped:
    def __init__(self, name, capabilities, corrupt=False, expected_failures=None):
        self._base = hiradix()
        self.name = name
        self.capabilities = frozenset(capabilities)
        self.default_extra_pools = ()
        self._corrupt = corrupt
        if expected_failures is not None:
            self.expected_failures = expected_failures

    def create(self, env):
        session = self._base.create(env)
        return CorruptingSession(session) if self._corrupt else session


def good():
    return Wrapped("good", {"pool:indexer"}, expected_failures=[{"test": "test_known_gap", "reason": "good lacks the gap fix"}])


def broken():
    return Wrapped("broken", set(), corrupt=True)
'''

SUITE = '''
import pytest
import torch

from conformance.scenarios.workload import request_data, request_tokens, store


@pytest.mark.clause("S5")
def test_roundtrip(make_cache):
    cache = make_cache()
    tokens = request_tokens(1, 8)
    data = request_data(cache, tokens, 1)
    store(cache, tokens, data)
    assert cache.prefetch("r", tokens) == 8
    cache.wait_prefetch_io("r")
    assert cache.check_progress(["r"]) == {"r": 8}
    loaded = cache.load_back(tokens)
    for name in cache.pools:
        assert torch.equal(loaded.data[name], data[name]), f"S5: pool {name}: loaded bytes differ"


@pytest.mark.clause("F1")
def test_needs_indexer(impl, device, require):
    require(impl, "pool:indexer")


@pytest.mark.clause("T1")
@pytest.mark.parametrize("policy", ["wait_complete", "timeout"])
def test_policy(impl, device, policy):
    assert policy == "wait_complete"


@pytest.mark.clause("C2")
def test_device_free(impl):
    assert impl.name in ("good", "broken")


@pytest.mark.clause("D1")
def test_fixed_already(impl):
    assert impl.name


@pytest.mark.clause("T2", "X4")
def test_known_gap(impl, device):
    assert False, "known gap"


@pytest.mark.clause("F3")
def test_fails_for_another_clause(impl):
    assert impl.name == "good", "L3: the ranks ran different collectives"


@pytest.mark.weak("checks the adapter's name only")
def test_weak_names_a_clause_when_it_fails(impl):
    assert impl.name == "good", "S1: a weak test's message"
'''

EXPECTED_FAILURES = '''
[[xfail]]
test = "test_known_gap"
reason = "broken never had the fix"

[[xfail]]
test = "test_policy[*-timeout]"
clause = "T1"
reason = "timeout policy unsupported"

[[xfail]]
impl = "good"
test = "test_policy[*-timeout]"
reason = "timeout policy unsupported"

[[xfail]]
impl = "good"
test = "test_fixed_already"
reason = "listed as failing but passes: strict xfail makes it fail"

[[xfail]]
test = "test_does_not_exist"
reason = "left over after a rename"

[[xfail]]
impl = "good"
test = "test_roundtrip"
clause = "T1"
reason = "the test does not cite T1"
'''

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("synthetic")
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "synthetic_adapters.py").write_text(ADAPTERS)
    (root / "test_synthetic.py").write_text(SUITE)
    (root / "broken.toml").write_text(EXPECTED_FAILURES)
    return root


def run_suite(subprocess_pytest, workdir: Path, workers: str) -> tuple[subprocess.CompletedProcess, dict, str]:
    report = workdir / "out" / f"n{workers}"
    result = subprocess_pytest.run(workdir, "--cache-impl", "synthetic_adapters:good", "--cache-impl", "synthetic_adapters:broken",
                        "--expected-failures", "broken.toml", "--conformance-report", str(report), "-n", workers, "-rsxX")
    assert result.returncode == 1, f"expected test failures (exit 1), got {result.returncode}\n{result.stdout}\n{result.stderr}"
    data = json.loads(report.with_name(report.name + ".json").read_text())
    markdown = report.with_name(report.name + ".md").read_text()
    return result, data, markdown


@pytest.fixture(scope="module")
def single(subprocess_pytest, workdir: Path):
    return run_suite(subprocess_pytest, workdir, "0")


@pytest.fixture(scope="module")
def distributed(subprocess_pytest, workdir: Path):
    return run_suite(subprocess_pytest, workdir, "2")


def expected_row(covered: dict[str, str]) -> dict[str, str]:
    return {clause: covered.get(clause, "uncovered") for clause in CATALOGUE}


def test_matrix_marks_each_status(single):
    _, data, _ = single
    # No GPU: every cuda cell of a cited clause is not-run, device-free tests included.
    cuda = expected_row({c: "not-run" for c in ("S5", "F1", "T1", "C2", "D1", "T2", "X4", "F3")})
    assert data["outcomes"] == {
        "good": {
            # test_fixed_already passes although listed as failing (strict XPASS): a failure naming no clause.
            # T1: test_policy passes under wait_complete and is an expected failure under timeout: not a pass.
            "cpu": expected_row({"S5": "pass", "F1": "pass", "T1": "xfail", "C2": "pass", "D1": "fail-other", "T2": "xfail", "X4": "xfail", "F3": "pass"}),
            "cuda": cuda,
        },
        "broken": {
            # broken's load-back returns zeros: S5 fails; it lacks pool:indexer: F1 skips;
            # test_fails_for_another_clause cites F3 but names L3: L3 failed here, F3 only marked;
            # the weak test failed naming S1, yet colours nothing (S1 stays uncovered).
            "cpu": expected_row({"S5": "fail", "F1": "skip", "T1": "xfail", "C2": "pass", "D1": "pass", "T2": "xfail", "X4": "xfail",
                                 "F3": "fail-other", "L3": "fail"}),
            "cuda": {**cuda, "L3": "not-run"},
        },
    }
    # The verdicts follow from those outcomes and each clause's kind (both adapters declare no profile: the spec's own).
    assert {c: v for c, v in data["matrix"]["broken"]["cpu"].items() if v != "uncovered"} == {
        "S5": "defect", "L3": "defect", "F1": "not-judged", "T1": "xfail", "C2": "pass", "D1": "pass", "T2": "xfail", "X4": "xfail",
        "F3": "unverified", "A1": "not-applicable", "A2": "not-applicable", "A3": "not-applicable",
        "R1": "not-applicable", "R2": "not-applicable"}
    assert data["matrix"]["good"]["cpu"]["D1"] == "unverified"
    assert data["cell_notes"]["broken"]["cpu"]["S5"] == {"kind": "safety", "why": "S5: pool kv: loaded bytes differ"}
    assert data["cell_notes"]["broken"]["cpu"]["F3"]["why"] == "its failing tests failed first on L3"
    assert data["cell_notes"]["broken"]["cpu"]["F1"]["why"].startswith("adapter 'broken' does not declare capability pool:indexer")
    assert data["declarations"]["broken"]["profile"] == "fenced_vote" and not data["declarations"]["broken"]["profile_declared"]
    covered = {"S5", "F1", "T1", "C2", "D1", "T2", "X4", "F3"}
    assert data["uncovered"]["good"]["cpu"] == [c for c in CATALOGUE if c not in covered]
    (not_run,) = data["devices_not_run"]
    assert not_run["device"] == "cuda" and not_run["reason"].startswith("no CUDA device visible (CUDA_VISIBLE_DEVICES ''"), not_run


def test_report_is_valid_under_its_schema_and_says_what_was_tested(single, workdir):
    _, data, markdown = single
    schema = json.loads((REPO / "conformance" / "report" / "schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
    errors = [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(data)]
    assert not errors, errors
    suite = data["suite"]
    assert suite["name"] == "hicache-conformance" and suite["path"] == str(REPO / "conformance")
    assert suite["commit"] is None or len(suite["commit"]) == 40
    assert data["run"]["pytest_args"][:2] == ["-p", "conformance.plugin"] and data["run"]["directory"] == str(workdir)
    assert data["target"]["device_kinds"] == ["cpu"]  # no GPU visible in these runs
    assert data["target"]["python"] == ".".join(map(str, sys.version_info[:3]))
    good = data["implementations"][0]
    assert (good["name"], good["source"], good["factory"], good["module"], good["adapter"], good["distribution"]) == (
        "good", "--cache-impl", "synthetic_adapters:good", "synthetic_adapters", "synthetic_adapters.Wrapped", None)
    assert [t["nodeid"].split("::")[1] for t in data["tests"] if t["weak"]] == [
        "test_weak_names_a_clause_when_it_fails[broken]", "test_weak_names_a_clause_when_it_fails[good]"]
    assert data["failing"]["broken"]["cpu"]["clauses"] == {"S5": "S5: pool kv: loaded bytes differ", "L3": "L3: the ranks ran different collectives"}
    assert [n.split("::")[1] for n in data["failing"]["broken"]["cpu"]["weak"]] == ["test_weak_names_a_clause_when_it_fails[broken]"]
    assert [n.split("::")[1] for n in data["failing"]["good"]["cpu"]["naming_no_clause"]] == ["test_fixed_already[good]"]
    assert data["decision_table"] == {} and data["not_run"] == []
    skips = {g["reason"]: g for g in data["skips"]}
    assert skips["adapter 'broken' does not declare capability pool:indexer "
                 "(pool:indexer: runs with an ALL_PAGES side pool that reuses the KV slot numbers)"]["impls"] == {"broken": 1}
    assert sum(g["count"] for g in data["skips"]) == sum(1 for t in data["tests"] if t["outcome"] == "skip")
    assert "STALE" in markdown and "`D` defect (a behavioural clause, or a mechanism of the declared profile, failed)" in markdown
    # The compact matrix: one row per implementation and device, one letter per clause, in the catalogue's order.
    row = data["matrix"]["broken"]["cpu"]
    assert [c for c, v in row.items() if v == "defect"] == ["S5", "L3"] and row["F3"] == "unverified"
    assert "| broken / cpu | " + " | ".join(LETTERS[row[c]] for c in CATALOGUE) + " |" in markdown and "| C1 | C2 | D1 |" in markdown
    assert markdown.index("## Matrix") < markdown.index("## Defects") < markdown.index("## Target")
    assert "### L3 (liveness: Same collectives on every rank of a group)" in markdown and "- **what goes wrong:** the ranks ran different collectives" in markdown
    assert "**cuda did not run here**" in markdown and "| good | --cache-impl synthetic_adapters:good |" in markdown


def test_each_defect_is_one_entry_with_its_tests(single):
    _, data, _ = single
    entries = {e["id"]: e for e in data["defects"]["entries"]}
    assert sorted(entries) == ["L3", "S5"]
    assert [t["nodeid"].split("::")[1] for t in entries["S5"]["tests"]] == ["test_roundtrip[broken-cpu]"]
    assert entries["L3"]["sentence"] == "the ranks ran different collectives" and entries["L3"]["verdict"] == "defect"
    # The failure that named no clause, and the weak one, are no entry.
    assert [n.split("::")[1] for n in data["defects"]["naming_no_clause"]] == ["test_fixed_already[good]"]


class Page(HTMLParser):
    """What a self-contained page must not have (anything loaded from elsewhere), and its anchors and links."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: set[str] = set()
        self.external: list[str] = []
        self.words: list[str] = []
        self.feed(text)
        self.text = " ".join(" ".join(self.words).split())

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.add(attrs["id"])
        href = attrs.get("href") or ""
        if href.startswith("#"):
            self.links.add(href[1:])
        elif href or attrs.get("src") or tag in ("script", "link", "img", "iframe"):
            self.external.append(f"<{tag} {attrs}>")

    def handle_data(self, data):
        self.words.append(data)


def test_html_page_is_self_contained_and_links_failing_cells(single, workdir):
    _, data, _ = single
    page = Page((workdir / "out" / "n0.html").read_text())
    assert not page.external, f"the page loads something from elsewhere: {page.external}"
    assert not page.links - page.ids, f"links to no anchor: {sorted(page.links - page.ids)}"
    # Every defect or hardening cell links to its entry, every entry has its card, every clause heading its text.
    failing_cells = sum(1 for devices in data["matrix"].values() for row in devices.values() for s in row.values() if s in ("defect", "hardening"))
    assert {link for link in page.links if link.startswith("defect-")} == {"defect-S5", "defect-L3"} and failing_cells == 2
    assert {f"clause-{c}" for c in CATALOGUE} <= page.ids
    for text in (CATALOGUE["F3"].statement, CATALOGUE["D3"].upstream, CATALOGUE["D3"].evidence[0]):
        assert " ".join(text.split()) in page.text, text
    assert "the ranks ran different collectives" in page.text and "cuda did not run here" in page.text


def test_ids_are_impl_then_device_then_own_params(single):
    _, data, _ = single
    by_id = {t["nodeid"].split("::")[1]: t for t in data["tests"]}
    assert by_id["test_policy[good-cpu-timeout]"]["outcome"] == "xfail"
    assert by_id["test_policy[broken-cpu-wait_complete]"]["outcome"] == "pass"
    assert by_id["test_roundtrip[broken-cpu]"]["outcome"] == "fail"
    assert by_id["test_device_free[good]"]["device"] == "any"
    assert by_id["test_known_gap[good-cpu]"]["clauses"] == ["T2", "X4"]
    assert by_id["test_roundtrip[broken-cpu]"]["failed_clauses"] == {"S5": "S5: pool kv: loaded bytes differ"}
    assert by_id["test_roundtrip[good-cpu]"]["failed_clauses"] is None
    assert len(by_id) == 18  # per impl, on the CPU only: roundtrip, needs_indexer, policy 2, device_free, fixed_already, known_gap, another, weak


def test_no_gpu_items_without_a_gpu_and_the_column_says_why(single):
    result, data, _ = single
    assert [t for t in data["tests"] if t["device"] == "cuda"] == []
    (not_run,) = data["devices_not_run"]
    assert not_run["device"] == "cuda" and "no CUDA device visible (CUDA_VISIBLE_DEVICES ''" in not_run["reason"]
    assert "cuda: did not run here (no CUDA device visible (CUDA_VISIBLE_DEVICES ''" in result.stdout


def test_expected_failures_are_strict_and_stale_ones_reported(single):
    result, data, _ = single
    assert "[XPASS(strict)]" in result.stdout  # test_fixed_already[good] passes although listed
    stale = [(e["impl"], e["test"]) for e in data["stale_expected_failures"]]
    assert stale == [("broken", "test_does_not_exist"), ("good", "test_roundtrip")]
    assert {(e["impl"], e["test"]) for e in data["expected_failures"] if e["matched"]} == {
        ("good", "test_known_gap"), ("broken", "test_known_gap"), ("broken", "test_policy[*-timeout]"),
        ("good", "test_policy[*-timeout]"), ("good", "test_fixed_already")}
    assert "WARNING stale expected failure: broken: test_does_not_exist" in result.stdout
    assert "conformance matrix (implementation x device x clause)" in result.stdout
    assert "legend: D defect (a behavioural clause, or a mechanism of the declared profile, failed)  H hardening not met" in result.stdout
    assert "broken/cpu: 2 defect, 0 hardening, 1 unverified," in result.stdout and "defects: S5, L3" in result.stdout
    assert "defects (2):" in result.stdout and " L3 liveness: the ranks ran different collectives [broken; 1 test]" in result.stdout
    assert "good/cpu: 0 defect, 0 hardening, 1 unverified," in result.stdout and "1 failed test(s) named no clause: test_fixed_already[good]" in result.stdout


def test_xdist_run_aggregates_the_same_report(single, distributed):
    _, one, _ = single
    result, two, _ = distributed
    assert "2 workers" in result.stdout or "gw1" in result.stdout
    for key in ("matrix", "tests", "expected_failures", "stale_expected_failures", "uncovered", "failing", "devices_not_run", "skips"):
        assert two[key] == one[key], key
    assert "WARNING stale expected failure: broken: test_does_not_exist" in result.stdout


def test_a_cell_note_prefers_a_trigger_a_deployment_produces_to_an_injected_fault():
    from conformance.report.matrix import OutcomeRecord, _cell_why

    injected = OutcomeRecord("t::a_injected", "x", "cpu", ["L5"], "fail",
                             {"L5": "L5: upstream's prefetch_io_aux_thread ended on InjectedFault: injected fault 'storage raises'"})
    natural = OutcomeRecord("t::b_truncated", "x", "cpu", ["L5"], "fail",
                            {"L5": "L5: upstream's prefetch_io_aux_thread ended on OSError: Short read for k__0_1"})
    assert _cell_why("L5", "defect", [injected, natural], None).endswith("OSError: Short read for k__0_1")
    assert _cell_why("L5", "defect", [injected], None).endswith("injected fault 'storage raises'"), "the injected one when it is all there is"
