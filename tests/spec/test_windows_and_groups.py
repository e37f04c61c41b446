"""F10 (a TRAILING_WINDOW pool's window) and process groups (X2, L3 per group): traces that hold and traces caught."""

import pytest

from spec import EventKind as K, check
from spec.decision import VOTE_COLLECTIVE
from spec.errors import ConfigError
from spec.fence import HitPolicy, PoolProgress, commit_payload, read_commit, trailing_attached, window_attachable_at_terminate, window_pages
from spec.groups import group_label, group_members, vote_group_kinds
from spec.trace import HOST, LOAD
from test_invariants import CFG, KV, PAGE, Run, good_run

WINDOW = (100, 101)  # the window pool's own slots: one page before the end


def window_run(*, window_ok=True, window_slots=WINDOW, hit_before_window=2, commit_tokens=4, rank=0):
    """A two-page prefetch with an indexer and a one-page window pool 'swa', terminated and committed."""
    run = Run(rank=rank)
    run.r(K.OP_START, value={"policy": "wait_complete", "start": 0.0, "page_size": PAGE, "requested_pages": 2, "window_pools": ["swa"]})
    run.r(K.ALLOC, pool="kv", space=HOST, slots=KV)
    run.r(K.ALLOC, pool="indexer", space=HOST, slots=KV)
    run.r(K.ALLOC, pool="swa", space=HOST, slots=WINDOW)
    run.r(K.HIT, value=hit_before_window)
    run.io("kv", KV)
    run.io("indexer", KV)
    io = run.rec.next_io_id()
    run.r(K.IO_START, pool="swa", space=HOST, slots=window_slots, io=io, value=LOAD)
    run.r(K.IO_END, pool="swa", space=HOST, slots=window_slots if window_ok else window_slots[:1], io=io, value=True)
    run.r(K.HIT, value=2)
    run.r(K.IO_DONE)
    run.check_step(True, run.state(), terminate=True, tokens=commit_tokens)
    run.insert(pools=("kv", "indexer"), slots=KV[:commit_tokens])
    run.r(K.INSERT, pool="swa", space=HOST, slots=WINDOW)
    return run


def test_window_pages_round_up_and_reject_bad_values():
    assert [window_pages(t, 4) for t in (1, 4, 5, 8)] == [1, 1, 2, 2]
    with pytest.raises(ConfigError, match="window_tokens"):
        window_pages(0, 4)


def test_a_window_is_attached_only_for_exactly_the_committed_length_on_every_rank():
    window = PoolProgress("swa", HitPolicy.TRAILING_WINDOW, 2)
    assert trailing_attached(window, 2) and not trailing_attached(window, 1) and not trailing_attached(window, 0)
    # Two ranks loaded the window for 2 pages, a third for none: the MIN/MAX payload drops it everywhere.
    payloads = [commit_payload(2, [2]), commit_payload(2, [2]), commit_payload(2, [0])]
    reduced = [min(column) for column in zip(*payloads)]
    assert read_commit(reduced).trailing_attached == (False,)
    assert read_commit([min(c) for c in zip(*payloads[:2])]).trailing_attached == (True,)


def test_f10_a_whole_window_loaded_for_the_committed_length_holds():
    run = window_run()
    assert check(run.trace(), CFG, clauses=["F10"]) == []
    assert window_attachable_at_terminate(run.trace().events, "r1", "swa") == 2


def test_f10_a_partial_window_attached_is_caught():
    run = window_run(window_ok=False)
    violations = check(run.trace(), CFG, clauses=["F10"])
    assert [v.clause for v in violations] == ["F10"] and "partial window" in violations[0].message
    assert window_attachable_at_terminate(run.trace().events, "r1", "swa") == 0


def test_f10_a_window_loaded_for_another_length_is_caught():
    run = window_run(hit_before_window=1)  # loaded while the hit was 1 page, attached to a 2-page commit
    violations = check(run.trace(), CFG, clauses=["F10"])
    assert [v.clause for v in violations] == ["F10"] and "another length's window" in violations[0].message


def test_f10_window_pages_inserted_without_a_load_are_caught():
    run = good_run()
    run.trace()  # a conforming run, then an insert of window pages nobody loaded
    run.rec.record(K.OP_START, op="r2", value={"policy": "wait_complete", "start": 0.0, "page_size": PAGE, "requested_pages": 1, "window_pools": ["swa"]})
    run.rec.record(K.INSERT, op="r2", pool="swa", space=HOST, slots=WINDOW)
    violations = check(run.trace(), CFG, clauses=["F10"])
    assert [v.clause for v in violations] == ["F10"] and "without a window load" in violations[0].message


# --- groups ---------------------------------------------------------------------------------------

def test_group_labels_name_the_kind_and_the_members():
    assert group_label("attn_tp", [3, 1]) == "attn_tp:1,3"
    assert group_members("attn_tp:1,3") == (1, 3) and group_members(None) is None
    with pytest.raises(ConfigError, match="group kind"):
        group_label("pp", [0])
    with pytest.raises(ConfigError, match="group"):
        group_members("attn_tp:")


def test_vote_groups_follow_upstreams_rule():
    assert vote_group_kinds({"tp": 4, "attn_tp": 2, "attn_cp": 2}) == ["attn_cp", "attn_tp"]
    assert vote_group_kinds({"tp": 4, "attn_tp": 1, "attn_cp": 1}) == ["tp"]
    assert vote_group_kinds({"tp": 1}) == []
    assert vote_group_kinds({"tp": 4, "attn_tp": 2}, rule="tp") == ["tp"]
    with pytest.raises(ConfigError, match="groups"):
        vote_group_kinds({"pp": 2})


def grid_runs(extra_on=None):
    """Four ranks as 2x2 groups (attn_tp {0,1} {2,3}, attn_cp {0,2} {1,3}), one check: a vote collective on each group.

    extra_on: (rank, label) where that rank runs one more vote collective in the check.
    """
    runs = []
    for rank in range(4):
        run = Run(rank=rank).start().load_all()
        run.step += 1
        run.r(K.STEP, op=None, step=1)
        run.r(K.VOTE, step=1, value=True, state=run.state())
        for kind, members in (("attn_cp", (rank % 2, rank % 2 + 2)), ("attn_tp", (rank - rank % 2, rank - rank % 2 + 1))):
            run.r(K.COLLECTIVE, step=1, value=VOTE_COLLECTIVE, group=group_label(kind, members))
        if extra_on is not None and extra_on[0] == rank:
            run.r(K.COLLECTIVE, step=1, value=VOTE_COLLECTIVE, group=extra_on[1], op="r9")
        runs.append(run)
    return [r.trace() for r in runs]


def test_one_vote_collective_per_group_in_a_grid_holds():
    assert check(grid_runs(), CFG, clauses=["X2", "L3"]) == []


def test_an_extra_collective_on_one_group_names_that_group_its_rank_and_step():
    violations = check(grid_runs(extra_on=(3, "attn_tp:2,3")), CFG, clauses=["L3"])
    assert len(violations) == 1, violations
    assert "step 1 on group attn_tp:2,3: rank 3" in violations[0].message
    # The other attn_tp group and both attn_cp groups agree: nothing is said about them.
    assert "attn_cp" not in violations[0].message and "0,1" not in violations[0].message
