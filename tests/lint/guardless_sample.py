"""A cache with extra pools and no guard: the smallest file HC101 must flag (the CLI tests lint it)."""

GUARDLESS = (
    "class Cache:\n"
    "    def can_terminate_prefetch(self, op):\n"
    "        completed = op.completed_tokens == len(op.hash_value) * self.page_size\n"
    "        return completed\n"
    "\n"
    "    def start_prefetch(self, op, transfers):  # extra pools, and their completion flag: a guard is owed\n"
    "        op.pool_transfers = transfers\n"
    "        op.pool_transfers_done = not transfers\n"
)
