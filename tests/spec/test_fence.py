import pytest

from spec import ConfigError, EventKind as K, HitPolicy, ManualClock, PoolProgress, TraceRecorder, agreed_pages, committable_pages, dispose_slots, trailing_attached
from spec.fence import committable_at_terminate
from spec.trace import HOST, LOAD


def test_commit_clamped_to_every_all_pages_pool():
    pools = [PoolProgress("indexer", HitPolicy.ALL_PAGES, 3), PoolProgress("mamba", HitPolicy.TRAILING_PAGES, 0)]
    assert committable_pages(5, pools) == 3
    assert committable_pages(2, pools) == 2
    assert committable_pages(5, [PoolProgress("indexer", "all_pages", 0)]) == 0
    assert committable_pages(4) == 4


def test_agreed_is_the_min_across_ranks():
    assert agreed_pages([4, 2, 3]) == 2
    with pytest.raises(ConfigError):
        agreed_pages([])


def test_trailing_state_only_for_its_exact_length():
    mamba = PoolProgress("mamba", HitPolicy.TRAILING_PAGES, 4)
    assert trailing_attached(mamba, 4)
    assert not trailing_attached(mamba, 3)
    assert not trailing_attached(PoolProgress("mamba", HitPolicy.TRAILING_PAGES, 0), 0)
    with pytest.raises(ConfigError):
        trailing_attached(PoolProgress("indexer", HitPolicy.ALL_PAGES, 4), 4)


def test_dispose_excludes_in_flight_slots():
    pages = [[0, 1], [2, 3], [4, 5], [6, 7]]
    d = dispose_slots(pages, inserted_pages=1, in_flight=[4, 5])
    assert d.insert == (0, 1)
    assert d.free_now == (2, 3, 6, 7)
    assert d.free_when_io_ends == (4, 5)


def test_inserting_a_slot_under_io_is_refused():
    with pytest.raises(ConfigError, match="no IO in flight"):
        dispose_slots([[0, 1]], inserted_pages=1, in_flight=[1])


def test_bad_progress_rejected():
    with pytest.raises(ConfigError, match="indexer.completed_pages"):
        PoolProgress("indexer", HitPolicy.ALL_PAGES, -1)
    with pytest.raises(ValueError):
        PoolProgress("indexer", "sometimes", 1)
    with pytest.raises(ConfigError):
        committable_pages(-2)


def test_commit_payload_agrees_pages_and_trailing_states_in_one_min():
    from spec.fence import commit_payload, read_commit, untracked_commit_payload

    def reduce_min(payloads):
        return [min(column) for column in zip(*payloads)]

    # Every rank loaded the state for the committed length: attach everywhere.
    both = reduce_min([commit_payload(4, [4]), commit_payload(4, [4])])
    assert read_commit(both).pages == 4 and read_commit(both).trailing_attached == (True,)
    # One rank's state was still in flight (0): nobody attaches, though pages agree.
    split = reduce_min([commit_payload(4, [4]), commit_payload(4, [0])])
    assert read_commit(split).pages == 4 and read_commit(split).trailing_attached == (False,)
    # States for a longer hit than the agreed commit: wrong length, not attached.
    longer = reduce_min([commit_payload(4, [6]), commit_payload(2, [6])])
    assert read_commit(longer).pages == 2 and read_commit(longer).trailing_attached == (False,)
    # An untracked rank forces an empty commit.
    gone = reduce_min([commit_payload(4, [4]), untracked_commit_payload(1)])
    assert read_commit(gone) == read_commit([0, 0, 0])
    assert read_commit(gone).pages == 0 and read_commit(gone).trailing_attached == (False,)
    with pytest.raises(ConfigError):
        read_commit([3, 1])


# --- the fence as an oracle over a trace ------------------------------------------------------

ORACLE_PS = 2
POOLS = {"kv": "all_pages", "indexer": "all_pages", "mamba": "trailing_pages"}


class OpTrace:
    """One operation of 3 pages (slots 10..15) with an indexer sharing its slots and one mamba state slot."""

    def __init__(self):
        self.rec = TraceRecorder(ManualClock())
        for pool in ("kv", "indexer"):
            self.r(K.ALLOC, pool=pool, space=HOST, slots=range(10, 16))
        self.r(K.ALLOC, pool="mamba", space=HOST, slots=[3])
        self.r(K.HIT, value=3)

    def r(self, kind, **kw):
        kw.setdefault("op", "r1")
        return self.rec.record(kind, **kw)

    def load(self, pool, slots, ok=True, end=True):
        io = self.rec.next_io_id()
        self.r(K.IO_START, pool=pool, space=HOST, slots=slots, io=io, value=LOAD)
        if end:
            self.r(K.IO_END, pool=pool, space=HOST, slots=slots, io=io, value=ok)

    def pages(self, pools=POOLS):
        return committable_at_terminate(self.rec.events(), "r1", pools, ORACLE_PS)


def test_oracle_commits_the_leading_pages_every_all_pages_pool_finished_before_terminate():
    t = OpTrace()
    t.load("kv", [10, 11, 12, 13, 14, 15])
    t.load("indexer", [10, 11, 12, 13])
    t.load("mamba", [3], ok=False)  # a trailing state does not bound the pages (F4 decides its attachment)
    t.r(K.TERMINATE, step=1, value=6)
    t.load("indexer", [14, 15])  # after terminate: counts for nothing
    assert t.pages() == 2
    assert t.pages({"kv": "all_pages"}) == 3  # without the indexer, KV alone


def test_oracle_counts_no_page_with_io_in_flight_or_failed_and_only_a_leading_run():
    t = OpTrace()
    t.load("kv", [10, 11], ok=False)
    t.load("kv", [12, 13, 14, 15])  # a later page loaded does not make an earlier one loaded
    t.r(K.TERMINATE, step=1, value=4)
    assert t.pages({"kv": "all_pages"}) == 0
    t = OpTrace()
    t.load("kv", [10, 11, 12, 13])
    t.load("kv", [14, 15], end=False)  # still running at terminate (F5)
    t.r(K.TERMINATE, step=1, value=4)
    assert t.pages({"kv": "all_pages"}) == 2


def test_oracle_clamps_to_the_hit_and_zeroes_revokes_and_aborts():
    t = OpTrace()
    t.load("kv", [10, 11, 12, 13, 14, 15])
    t.r(K.HIT, value=1)  # trimmed after a failure
    t.r(K.TERMINATE, step=1, value=2)
    assert t.pages({"kv": "all_pages"}) == 1
    revoked = OpTrace()
    revoked.load("kv", [10, 11])
    revoked.r(K.REVOKE, value="short_hit")
    assert revoked.pages() == 0
    aborted = OpTrace()
    aborted.load("kv", [10, 11])
    aborted.r(K.TERMINATE, step=None, value=2)  # outside a check: joins the commit with nothing (X4)
    assert aborted.pages({"kv": "all_pages"}) == 0
    running = OpTrace()
    running.load("kv", [10, 11])
    assert running.pages() is None


def test_oracle_cuts_a_commit_without_terminate_at_the_commit():
    """The ACK drain commits a completed prefetch in a scheduler step with no terminate: what had loaded by then counts."""
    t = OpTrace()
    t.load("kv", [10, 11, 12, 13, 14, 15])
    t.load("indexer", [10, 11])
    t.load("indexer", [12, 13, 14, 15], ok=False)  # two indexer pages gone from storage
    assert t.pages() is None  # neither terminated nor committed yet
    t.r(K.COMMIT, step=2, value=6)
    t.load("indexer", [12, 13])  # after the commit: counts for nothing
    assert t.pages() == 1
    assert t.pages({"kv": "all_pages"}) == 3


def test_oracle_bounds_by_a_pool_that_rides_the_kv_slots():
    """A KV-derived pool (indices_from_pool=KV) allocates no slots of its own: its loads are judged on KV's slots."""
    t = OpTrace()
    t.rec = TraceRecorder(ManualClock())
    t.r(K.ALLOC, pool="kv", space=HOST, slots=range(10, 16))
    t.r(K.HIT, value=3)
    t.load("kv", [10, 11, 12, 13, 14, 15])
    t.load("indexer", [10, 11])
    t.r(K.TERMINATE, step=1, value=6)
    assert t.pages() == 1
    assert t.pages({"kv": "all_pages"}) == 3
