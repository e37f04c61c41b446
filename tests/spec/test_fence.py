import pytest

from spec import ConfigError, HitPolicy, PoolProgress, agreed_pages, committable_pages, dispose_slots, trailing_attached


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
