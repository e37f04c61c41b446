"""The prefetch timeout (clauses T1 and T2).

budget = min(timeout_max_s, timeout_base_s + timeout_per_ki_token_s * tokens / 1024)
with tokens = hit pages * page size. An operation is timed out when the time
elapsed since its start on the injected monotonic clock is strictly greater
than its budget: at exactly the deadline it is not yet timed out.
"""

from __future__ import annotations

from spec.config import TerminationConfig
from spec.errors import ConfigError


def timeout_budget(config: TerminationConfig, hit_pages: int) -> float:
    if isinstance(hit_pages, bool) or not isinstance(hit_pages, int) or hit_pages < 0:
        raise ConfigError("hit_pages", hit_pages, "an integer >= 0")
    tokens = hit_pages * config.page_size
    uncapped = config.timeout_base_s + config.timeout_per_ki_token_s * tokens / 1024
    return min(config.timeout_max_s, uncapped)


def is_timed_out(start: float, now: float, budget: float) -> bool:
    """Strictly past the budget; elapsed == budget is still within it."""
    return (now - start) > budget
