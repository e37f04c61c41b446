"""HC109: a note where the configuration expects extra pools that the code does not show."""

from __future__ import annotations

from lint.rules.base import EXAMPLE_PATH, Invalid, NoteRule, Valid

# No line of this class brings extra-pool transfers in, and no flag exists.
KV_ONLY = '''
class KvOnlyCache:
    def can_terminate_prefetch(self, operation):
        completed = operation.completed_tokens == len(operation.hash_value) * self.page_size
        if self.prefetch_stop_policy == "wait_complete":
            return completed
        return completed or self.timed_out(operation)
'''

EXPECTS_POOLS = {"implementations": [
    {"method": f"{EXAMPLE_PATH}::KvOnlyCache.can_terminate_prefetch", "extra-pools": True}]}


class PoolsUnseen(NoteRule):
    """A guard is owed only where the class has extra-pool transfers (it reads,
    stores, passes or schedules them, itself, through a module function it
    calls or through a base class) and the code base tracks their completion
    apart from KV (the `pool_transfers_done` flag exists in the linted files,
    the configured implementations or the project tree). Where either is
    missing HC101-HC103 stay silent; when the configuration says the class has
    extra pools (`extra-pools = true`), this note says which evidence is
    missing and what would be reported once both exist. Never fails a run."""

    code = "HC109"
    name = "pools-unseen"
    summary = "configured with extra pools, but the code shows no extra-pool transfer or no completion flag"
    clauses = ("D3",)

    VALID = (Valid(KV_ONLY),)  # not configured: a class without extra pools owes no guard, and no note
    INVALID = (Invalid(KV_ONLY, line=3, message="extra-pools = true", config=EXPECTS_POOLS),)
