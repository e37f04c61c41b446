"""Where the shim records a vote upstream cast without a collective: at upstream's own return line, in its file.

A report's "where" reads the frames that recorded each event (conformance/report/sites.py); one rank runs
no collective, so the vote is recorded from inside upstream's return, never after its code has gone.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from caches.upstream_decision import sglang_adapters
from conformance.adapter import CacheEnv
from conformance.report import sites
from spec.clock import ManualClock
from spec.config import TerminationConfig
from spec.decision import DecisionState
from spec.trace import EventKind, TraceRecorder

PRE_FIX = Path(__file__).resolve().parents[1] / "sglang_checkouts" / "pre_fix"
SOURCE = Path("python", "sglang", "srt", "mem_cache", "hiradix_cache.py")
PAGE_SIZE = 4


def return_line(text: str) -> int:
    lines = (PRE_FIX / SOURCE).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if line.strip() == text)


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """The hand-written checkout with sglang/__init__.py, as a real tree has (its files are shown from there)."""
    root = tmp_path_factory.mktemp("tree") / "checkout"
    shutil.copytree(PRE_FIX, root)
    (root / "python" / "sglang" / "__init__.py").write_text("")
    return root


@pytest.mark.parametrize("terminated", [False, True], ids=["voting", "already-terminated"])
@pytest.mark.parametrize("policy, returns", [("best_effort", "return can_terminate"),
                                              ("wait_complete", "return can_terminate or operation_terminated")])
def test_a_vote_without_a_collective_is_recorded_at_upstream_s_return(tmp_path, checkout, policy, returns, terminated):
    (adapter,) = [a for a in sglang_adapters(checkout)[0] if a.key == "hiradix"]
    clock = ManualClock(1000.0)
    trace = sites.attach(TraceRecorder(clock))
    env = CacheEnv(device="cpu", termination=TerminationConfig(policy=policy, page_size=PAGE_SIZE), storage_dir=tmp_path,
                   clock=clock, trace=trace, extra_pools=adapter.default_extra_pools)
    cache = adapter.create(env)
    try:
        state = DecisionState(policy, PAGE_SIZE, 2, 8, False, True, False, terminated)
        cache.can_terminate(cache.make_operation(state, start_time=clock.now()))
    finally:
        cache.close()
    (vote,) = [e for e in trace.events() if e.kind is EventKind.VOTE]
    site = sites.sites(trace)[vote.seq]
    assert site.startswith(f"sglang/srt/mem_cache/hiradix_cache.py:{return_line(returns)} (can_terminate_prefetch)"), site
