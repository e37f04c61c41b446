"""The scheduler's abort paths, read from hand-written upstream-shaped schedulers (no upstream code): which methods
drop a waiting request, and which cache call each makes (directly, through one helper, or none)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from conformance.live.abort_paths import AbortPath, abort_paths_of
from conformance.live.adapter import adapters_for
from conformance.live.tree import locate

HIRADIX = "class HiRadixCache(RadixCache):\n    def release_aborted_request(self, rid):\n        pass\n"

SCHEDULER = """
class Scheduler:
    def _abort_on_queued_limit(self, recv_req):
        idx, candidate_req = max(enumerate(self.waiting_queue))
        if abort_existing_req:
{preempt}
            self.waiting_queue.pop(idx)
            req_to_abort = candidate_req

    def _abort_on_waiting_timeout(self):
        for req in self.waiting_queue:
            if 0 < req.entry_time < deadline:
                self._release_aborted(req)
                deleted_reqs.add(req)
        if deleted_reqs:
            self.waiting_queue = [r for r in self.waiting_queue if r not in deleted_reqs]

    def _release_aborted(self, req):
        req.release_inputs()
        self.tree_cache.release_aborted_request(req.rid)

    def abort_running(self, recv_req):
        for req in self.running_batch.reqs:
            req.to_finish = FINISH_ABORT()

    def abort_request(self, recv_req):
        for i, req in enumerate(self.waiting_queue):
            if req.rid == recv_req.rid:
                req = self.waiting_queue.pop(i)
                if self.enable_hierarchical_cache:
                    self.tree_cache.release_aborted_request(req.rid)
                break
"""
NOTHING = "            pass"
TERMINATE = "            if self.enable_hierarchical_cache:\n                self.tree_cache.terminate_prefetch(candidate_req.rid)"
BRANCHED = ("            if self.enable_hicache_storage:\n                self.tree_cache.release_aborted_request(candidate_req.rid)\n"
            "            elif self.enable_hierarchical_cache:\n                self.tree_cache.terminate_prefetch(candidate_req.rid)")


def tree(root: Path, preempt: str):
    srt = root / "python" / "sglang" / "srt"
    (srt / "mem_cache").mkdir(parents=True)
    (srt / "managers").mkdir(parents=True)
    (root / "python" / "sglang" / "__init__.py").write_text("")
    (srt / "mem_cache" / "hiradix_cache.py").write_text(HIRADIX)
    (srt / "managers" / "scheduler.py").write_text(SCHEDULER.format(preempt=preempt))
    return locate(f"{root}@abc")


def test_every_method_that_drops_a_waiting_request_is_a_path_with_the_cache_call_it_makes(tmp_path):
    paths = abort_paths_of(tree(tmp_path, NOTHING))
    assert list(paths) == ["_abort_on_queued_limit", "_abort_on_waiting_timeout", "abort_request"], "abort_running drops nothing"
    assert paths["_abort_on_queued_limit"].calls == ()
    assert paths["_abort_on_waiting_timeout"].calls == ("release_aborted_request",), "through the scheduler's own helper"
    assert paths["abort_request"].calls == ("release_aborted_request",)
    told_nothing = str(paths["_abort_on_queued_limit"])
    assert "drops the waiting request and tells the cache nothing" in told_nothing
    assert "scheduler.py:7: the scheduler's _abort_on_queued_limit takes the request out of the waiting queue" in told_nothing, told_nothing
    helper = paths["_abort_on_waiting_timeout"].evidence
    assert any("scheduler.py:20:" in line and "release_aborted_request" in line for line in helper), helper


def test_a_path_that_only_terminates_names_that_call_and_a_branch_takes_its_first_call(tmp_path):
    assert abort_paths_of(tree(tmp_path / "a", TERMINATE))["_abort_on_queued_limit"].calls == ("terminate_prefetch",)
    assert abort_paths_of(tree(tmp_path / "b", BRANCHED))["_abort_on_queued_limit"].calls == ("release_aborted_request", "terminate_prefetch")


def test_the_call_made_is_the_first_the_cache_has():
    path = AbortPath("_abort_on_queued_limit", ("release_aborted_request", "terminate_prefetch"), ())
    assert path.call_on(SimpleNamespace(terminate_prefetch=lambda rid: None)) == "terminate_prefetch"
    assert path.call_on(SimpleNamespace(release_aborted_request=lambda rid: None, terminate_prefetch=lambda rid: None)) == "release_aborted_request"
    assert AbortPath("x", (), ()).call_on(SimpleNamespace()) is None


def test_the_live_adapter_declares_the_paths_and_a_tree_without_a_scheduler_declares_none(tmp_path):
    (adapter,) = adapters_for(tree(tmp_path / "a", NOTHING))
    assert list(adapter.abort_paths) == ["_abort_on_queued_limit", "_abort_on_waiting_timeout", "abort_request"]
    (tmp_path / "a" / "python" / "sglang" / "srt" / "managers" / "scheduler.py").unlink()
    assert abort_paths_of(locate(f"{tmp_path / 'a'}@abc")) == {}
