"""Method-level suppression comments."""

from __future__ import annotations

from lint.api import lint_source
from lint.config import Config
from lint.rules.base import POOLED_TAIL

UNGUARDED = '''
class Cache:
{above}    def can_terminate_prefetch(self, op):{inline}
        completed = op.completed_tokens == len(op.hash_value) * self.page_size
        return completed
''' + POOLED_TAIL

GUARDED = '''
class Cache:
{above}    def can_terminate_prefetch(self, op):{inline}
        completed = op.completed_tokens == len(op.hash_value) * self.page_size
        if completed and op.pool_transfers and not op.pool_transfers_done:
            completed = False
        return completed
'''


def codes(text: str, config: Config | None = None) -> list[tuple[str, int]]:
    return [(f.code, f.line) for f in lint_source(text, config).findings]


def source(template: str, above: str = "", inline: str = "") -> str:
    return template.format(above=above, inline=inline)


def test_unsuppressed_finding():
    assert codes(source(UNGUARDED)) == [("HC101", 3)]


def test_comment_on_the_line_above():
    text = source(UNGUARDED, above="    # hicache-lint: ignore[HC101] reason: no extra pools here\n")
    assert codes(text) == []


def test_comment_on_the_def_line():
    text = source(UNGUARDED, inline="  # hicache-lint: ignore[HC101] reason: no extra pools here")
    assert codes(text) == []


def test_comment_in_a_block_above_decorators_and_between_them():
    block = (
        "    # Explains the class.\n"
        "    # hicache-lint: ignore[HC101] reason: tested by the harness instead\n"
        "    @some.decorator\n"
        "    # a comment between decorators\n"
    )
    assert codes(source(UNGUARDED, above=block)) == []
    between = "    @some.decorator\n    # hicache-lint: ignore[HC101] reason: tested elsewhere\n"
    assert codes(source(UNGUARDED, above=between)) == []


def test_comment_separated_by_a_blank_line_does_not_apply():
    text = source(UNGUARDED, above="    # hicache-lint: ignore[HC101] reason: detached\n\n")
    assert codes(text) == [("HC101", 5)]


def test_missing_reason_is_invalid_and_silences_nothing():
    for comment in ("# hicache-lint: ignore[HC101]", "# hicache-lint: ignore[HC101] reason:   "):
        text = source(UNGUARDED, above=f"    {comment}\n")
        assert codes(text) == [("HC106", 3), ("HC101", 4)]
        (bad,) = [f for f in lint_source(text).findings if f.code == "HC106"]
        assert "gives no reason" in bad.message


def test_unknown_code_and_missing_codes_are_invalid():
    text = source(UNGUARDED, above="    # hicache-lint: ignore[HC101,HC105] reason: x\n")
    assert ("HC106", 3) in codes(text)
    text = source(UNGUARDED, above="    # hicache-lint: ignore reason: everything\n")
    assert ("HC106", 3) in codes(text)
    text = source(UNGUARDED, above="    # hicache-lint: disable[HC101] reason: x\n")
    assert ("HC106", 3) in codes(text)


def test_unused_suppression_is_reported():
    text = source(GUARDED, above="    # hicache-lint: ignore[HC101] reason: stale\n")
    (finding,) = lint_source(text).findings
    assert (finding.code, finding.line, finding.col) == ("HC105", 3, 5)
    assert "no HC101 finding" in finding.message


def test_partly_used_suppression_reports_the_unused_code():
    text = source(UNGUARDED, above="    # hicache-lint: ignore[HC101,HC102] reason: legacy\n")
    assert codes(text) == [("HC105", 3)]
    assert "HC102" in lint_source(text).findings[0].message


def test_suppression_of_a_disabled_rule_is_not_unused():
    text = source(GUARDED, above="    # hicache-lint: ignore[HC101] reason: stale\n")
    assert codes(text, Config(ignore=("HC101",))) == []
    assert codes(text, Config(ignore=("HC105",))) == []


def test_suppression_covers_drift_on_the_method():
    # Legacy handles a stop policy the other two do not: 'policies' drift
    legacy = source(UNGUARDED, above="    # hicache-lint: ignore[HC101,HC104] reason: legacy\n").replace(
        "Cache", "Legacy").replace(
        "        return completed\n",
        "        if self.prefetch_stop_policy == \"best_effort\":\n            return True\n        return completed\n")
    three = source(GUARDED) + legacy + source(GUARDED).replace("Cache", "Third")
    assert codes(three) == []
    unsuppressed = three.replace("ignore[HC101,HC104]", "ignore[HC101]")
    assert [code for code, _ in codes(unsuppressed)] == ["HC104"]


def test_drift_does_not_repeat_the_missing_guard():
    # the guard's absence is HC101's finding; a stale HC104 suppression says so
    two = source(GUARDED) + source(
        UNGUARDED, above="    # hicache-lint: ignore[HC101,HC104] reason: legacy\n").replace("Cache", "Legacy")
    assert codes(two) == [("HC105", 10)]
