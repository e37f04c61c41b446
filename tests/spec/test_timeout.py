import pytest

from spec import ConfigError, ManualClock, TerminationConfig, is_timed_out, timeout_budget


def test_budget_formula_with_defaults():
    cfg = TerminationConfig(page_size=64)
    # 16 pages * 64 tokens = 1024 tokens -> 2.0 + 0.1 * 1 = 2.1 s
    assert timeout_budget(cfg, 16) == pytest.approx(2.1)
    assert timeout_budget(cfg, 0) == 2.0


def test_budget_is_capped_by_max():
    cfg = TerminationConfig(page_size=1024, timeout_base_s=2.0, timeout_per_ki_token_s=1.0, timeout_max_s=10.0)
    assert timeout_budget(cfg, 7) == 9.0
    assert timeout_budget(cfg, 8) == 10.0
    assert timeout_budget(cfg, 10_000) == 10.0


@pytest.mark.parametrize("pages", [-1, 1.5, True, None])
def test_budget_rejects_bad_page_counts(pages):
    with pytest.raises(ConfigError, match="hit_pages"):
        timeout_budget(TerminationConfig(), pages)


def test_exactly_at_the_deadline_is_not_timed_out():
    # Values chosen to be exact in binary floating point.
    cfg = TerminationConfig(page_size=256, timeout_base_s=2.0, timeout_per_ki_token_s=0.5)
    budget = timeout_budget(cfg, 4)  # 1024 tokens -> 2.5 s
    assert budget == 2.5
    clock = ManualClock(start=100.0)
    start = clock.now()
    clock.advance(2.5)
    assert not is_timed_out(start, clock.now(), budget)
    clock.advance(2.0 ** -40)
    assert is_timed_out(start, clock.now(), budget)


def test_before_deadline_is_not_timed_out():
    assert not is_timed_out(0.0, 1.999, 2.0)
    assert is_timed_out(0.0, 2.001, 2.0)


def test_manual_clock_is_monotonic():
    clock = ManualClock(5.0)
    assert clock.advance(1.0) == 6.0
    assert clock.set(7.5) == 7.5
    with pytest.raises(ConfigError, match="never goes back"):
        clock.set(7.0)
    with pytest.raises(ConfigError, match="never goes back"):
        clock.advance(-0.5)
    with pytest.raises(ConfigError, match="finite"):
        clock.advance(float("nan"))
    assert clock.now() == 7.5
