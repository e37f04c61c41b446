"""The closing check after a test: a background error is reported once, by the test that found it, or at teardown."""

from __future__ import annotations

import pytest

from conformance.oracles.lifecycle import close_and_check

DEATH = "L5: upstream's prefetch_io_aux_thread ended on OSError: Short read for ab12__0_1 in _page_transfer"


class DeadThreadCache:
    def threads(self):
        return []

    def close(self):
        pass

    def background_errors(self):
        return [DEATH]


def test_an_unreported_background_error_fails_the_teardown():
    with pytest.raises(AssertionError, match="unexpected exceptions on background threads"):
        close_and_check([DeadThreadCache()])


def test_a_background_error_the_test_already_failed_on_is_not_a_second_error():
    close_and_check([DeadThreadCache()], already_reported=f"L5: prefetches ['faulty'] never finished: the implementation's "
                                                          f"background threads failed: {DEATH}")


def test_a_failure_about_something_else_still_leaves_the_background_error_to_teardown():
    with pytest.raises(AssertionError, match="Short read"):
        close_and_check([DeadThreadCache()], already_reported="S3: host slot 4 freed twice")
