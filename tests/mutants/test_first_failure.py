"""Which failure a campaign judges a kill by: of those that came in before the run stopped, the one the suite orders first."""

from __future__ import annotations

import json
from types import SimpleNamespace

from conformance.mutants.first_failure import FirstFailure
from conformance.report.failures import PROP_FAILED


def failed(nodeid: str, clause: str | None, when: str = "call"):
    named = {clause: f"{clause}: what broke"} if clause else {}
    return SimpleNamespace(nodeid=nodeid, failed=True, skipped=False, when=when,
                           user_properties=[(PROP_FAILED, json.dumps(named))], longreprtext="E   ValueError: boom")


def test_the_failure_earliest_in_the_suites_order_wins_over_the_quicker_worker(tmp_path):
    plugin = FirstFailure(str(tmp_path / "result.json"))
    plugin.pytest_xdist_node_collection_finished(None, ["test_decision::a", "test_windows::b", "test_windows::c"])
    plugin.pytest_runtest_logreport(failed("test_windows::c", "L1"))  # the other worker was quicker
    plugin.pytest_runtest_logreport(failed("test_decision::a", "D3"))
    plugin.pytest_sessionfinish(None, 1)
    result = json.loads((tmp_path / "result.json").read_text(encoding="utf-8"))
    assert result["first_failure"]["nodeid"] == "test_decision::a" and result["first_failure"]["clauses"] == ["D3"]
    assert result["failures"] == 2 and result["counts"] == {"failed": 2}


def test_a_failure_outside_the_collection_comes_first_and_ties_keep_their_arrival(tmp_path):
    plugin = FirstFailure(str(tmp_path / "result.json"))
    plugin.pytest_collection_finish(SimpleNamespace(items=[SimpleNamespace(nodeid="t::a"), SimpleNamespace(nodeid="t::b")]))
    plugin.pytest_runtest_logreport(failed("t::a", None, when="call"))
    plugin.pytest_runtest_logreport(failed("t::a", "F2", when="teardown"))
    assert plugin.first()["when"] == "call" and plugin.first()["message"] == "ValueError: boom"
    plugin.pytest_collectreport(failed("", None, when="collect"))
    assert plugin.first()["nodeid"] == "(collection)"
    assert FirstFailure(str(tmp_path / "none.json")).first() is None


def test_the_earliest_failure_naming_a_clause_is_kept_beside_the_first(tmp_path):
    plugin = FirstFailure(str(tmp_path / "result.json"))
    plugin.pytest_xdist_node_collection_finished(None, ["t::setup_sees_it", "t::names_it", "t::names_later"])
    plugin.pytest_runtest_logreport(failed("t::names_later", "F8"))
    plugin.pytest_runtest_logreport(failed("t::names_it", "S3"))
    plugin.pytest_runtest_logreport(failed("t::setup_sees_it", None))
    plugin.pytest_sessionfinish(None, 1)
    result = json.loads((tmp_path / "result.json").read_text(encoding="utf-8"))
    assert result["first_failure"]["nodeid"] == "t::setup_sees_it" and result["first_failure"]["clauses"] == []
    assert result["first_naming_failure"]["nodeid"] == "t::names_it" and result["first_naming_failure"]["clauses"] == ["S3"]
    assert FirstFailure(str(tmp_path / "none.json")).first_naming() is None
