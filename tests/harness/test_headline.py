"""A failure's pytest output leads with its clause, kind and cause; the harness's frames are hidden, the implementation's kept."""

from __future__ import annotations

import pytest

from conformance.plugin.headline import headline

SUITE = '''
from conformance.oracles.lifecycle import close_and_check


class UpstreamCache:
    """Stands for an implementation's own object: its frames must stay in the traceback."""

    def threads(self):
        return []

    def close(self):
        raise AssertionError("S3: host slot 4 freed twice at #12 free rank 0 op r1 pool kv space host slots [4]")


def test_closing_breaks_a_clause():
    close_and_check([UpstreamCache()])
'''


@pytest.fixture(scope="module")
def output(subprocess_pytest, tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("headline")
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "test_headline_suite.py").write_text(SUITE)
    result = subprocess_pytest.run(root, "-p", "no:randomly", "-rf", env_extra={"COLUMNS": "240"})
    assert result.returncode == 1, result.stdout + result.stderr
    return result.stdout


def test_the_failure_opens_with_the_clause_its_kind_and_what_broke(output):
    section = output[output.index("_ test_closing_breaks_a_clause _"):]
    first = section.splitlines()[1]
    assert first == "S3 (safety: Slots end exactly once): host slot 4 freed twice", section[:600]
    assert "FAILED test_headline_suite.py::test_closing_breaks_a_clause - S3 (safety: Slots end exactly once)" in output


def test_the_harness_frames_are_hidden_and_the_implementations_kept(output):
    assert "def close(self):" in output and "UpstreamCache" in output
    assert "lifecycle.py" not in output and "instance.close()" not in output


def test_a_headline_names_where_the_implementation_recorded_the_event():
    cause = {"clause": "D5", "line": "D5/L2: voted False where the spec votes True at #3 vote rank 0 op r1",
             "also": ["L2"], "sites": ["sglang/srt/mem_cache/hiradix_cache.py:1357 (can_terminate_prefetch) < x.py:1 (f)"]}
    assert headline(cause) == ("D5 (mechanism: timeout votes completion or timed out) (also L2): voted False where the spec votes True "
                               "[at sglang/srt/mem_cache/hiradix_cache.py:1357 (can_terminate_prefetch)]")
    assert headline({"clause": "C2", "line": "C2: accepted page_size -4"}) == "C2 (hardening: Numeric fields validated): accepted page_size -4"
