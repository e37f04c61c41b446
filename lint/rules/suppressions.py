"""HC105 and HC106: problems with suppression comments (applied in lint.suppress)."""

from __future__ import annotations

from lint.rules.base import POOLED_TAIL, Invalid, SuppressionRule
from lint.rules.examples import PREDICATE

_UNGUARDED_BODY = PREDICATE + "        return completed\n" + POOLED_TAIL
_GUARDED_BODY = PREDICATE + '''\
        if completed and op.pool_transfers and not op.pool_transfers_done:
            completed = False
        return completed
'''


class UnusedSuppression(SuppressionRule):
    """A suppression that silences nothing hides the next real regression on
    that method; remove it."""

    code = "HC105"
    name = "unused-suppression"
    summary = "suppression comment silences no finding"

    VALID = (
        '''
class ReadOnlyCache:
    # hicache-lint: ignore[HC101] reason: a single-rank test double whose pool reads are synchronous
    def can_terminate_prefetch(self, op):
''' + _UNGUARDED_BODY,
        '''
class ReadOnlyCache:
    def can_terminate_prefetch(self, op):  # hicache-lint: ignore[HC101] reason: pool reads are synchronous here
''' + _UNGUARDED_BODY,
        '''
class ReadOnlyCache:
    def can_terminate_prefetch(self, op):  # noqa: HC101 reason: pool reads are synchronous here
''' + _UNGUARDED_BODY,
    )
    INVALID = (
        Invalid('''
class Cache:
    # hicache-lint: ignore[HC101] reason: stale, the guard was added since
    def can_terminate_prefetch(self, op):
''' + _GUARDED_BODY, line=3, message="no HC101 finding"),
    )


class InvalidSuppression(SuppressionRule):
    """Every suppression, `# noqa: HC...` included, must name the codes it
    silences and say why; one that does not is reported and silences nothing."""

    code = "HC106"
    name = "invalid-suppression"
    summary = "suppression comment without a reason, codes, or with an unknown code"

    VALID = UnusedSuppression.VALID
    INVALID = (
        Invalid('''
class Cache:
    # hicache-lint: ignore[HC101]
    def can_terminate_prefetch(self, op):
''' + _UNGUARDED_BODY, line=3, message="gives no reason"),
        Invalid('''
class Cache:
    def can_terminate_prefetch(self, op):  # hicache-lint: ignore[HC999] reason: typo
''' + _UNGUARDED_BODY, line=3, message="cannot suppress 'HC999'"),
        Invalid('''
class Cache:
    # hicache-lint: ignore reason: everything
    def can_terminate_prefetch(self, op):
''' + _UNGUARDED_BODY, line=3, message="must name the codes"),
        # noqa too needs a reason; without one the HC101 finding stands
        Invalid('''
class Cache:
    def can_terminate_prefetch(self, op):  # noqa: HC101
''' + _UNGUARDED_BODY, line=3, message="noqa for HC101 gives no reason"),
    )
