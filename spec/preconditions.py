"""Scenario preconditions: what a scenario assumes of the deployment it models.

A scenario that assumes something the implementation's deployment never
produces says nothing about that implementation: it is not judged (never
failed). Each adapter states which preconditions its deployment produces,
with evidence (a file and line of the deployment's code); one it does not
state is assumed to hold, so an undeclared deployment is judged by every
scenario.
"""

from __future__ import annotations

from dataclasses import dataclass

from spec.errors import ConfigError


@dataclass(frozen=True)
class Precondition:
    id: str
    statement: str
    example: str  # a deployment that produces it


_PRECONDITIONS = [
    Precondition(
        "abort_on_one_rank",
        "An abort can reach some ranks of a group and not the others in the same scheduler step.",
        "a scheduler that receives requests per rank, or aborts on a rank-local cause, without broadcasting the abort",
    ),
    Precondition(
        "attention_cp_with_dp_attention",
        "The model runs attention context parallelism with data-parallel attention: a request's KV is split across "
        "the ranks of its attention context-parallel group, and the scheduler hands the cache its attention "
        "tensor-parallel group as its tensor-parallel group (as small as one rank).",
        "DSA prefill context parallelism under --enable-dp-attention (attn_cp_size = tp_size // dp_size, attention "
        "tensor parallelism of one rank), the cache built with tp_cache_group = the attention TP group",
    ),
    Precondition(
        "rank_local_abort_clock",
        "The scheduler aborts a waiting request when its own rank's clock passes a deadline, without agreeing the abort across ranks, "
        "so ranks can abort the same request at different steps.",
        "a waiting-timeout abort computed from each rank's time.perf_counter() and acted on at once",
    ),
    Precondition(
        "rank_local_backups",
        "Each rank backs up its own pages to storage, so one rank's backup can fail while its peers' succeed, and that "
        "rank's storage then lacks pages its peers' holds.",
        "tensor-parallel ranks that each store their own shard of a page (per-head KV), each under a key of its own",
    ),
    Precondition(
        "rank_local_host_room",
        "Ranks of a vote group can have different free room in their host tier at the same step, so that one rank's "
        "prefetch or backup takes fewer host slots than its peers' do.",
        "host tiers each rank sizes from its own measure of memory, or host slots a rank allocates or frees on its own "
        "account without agreeing it across ranks",
    ),
    Precondition(
        "shared_storage_across_configs",
        "Servers whose KV pages differ in format (dtype, layout, page size) or in sharding (tensor-parallel size) can "
        "share one storage namespace.",
        "a storage directory or service given to every server of a model, whatever its KV cache dtype or world size",
    ),
]

PRECONDITIONS: dict[str, Precondition] = {p.id: p for p in _PRECONDITIONS}


def precondition(precondition_id: str) -> Precondition:
    try:
        return PRECONDITIONS[precondition_id]
    except KeyError:
        raise ConfigError("precondition", precondition_id, "one of " + ", ".join(PRECONDITIONS)) from None
