"""A node reshaped while its backup is in flight: every page the backup was started for ends stored (L6).

Write-through copies a request's device pages to the host, then the host
pages to storage. An insert that shares only part of the request splits
its node; done before the host copy is acknowledged, or while either copy
is still running, the backup must still
store every page it was started for, under each page's own key: a
backup that follows the node as it is at the ack stores only the tail,
and the storage tier serves a shorter prefix than was written, silently,
to every server that shares it. A fresh cache on the same storage is the
judge: it must find, load and serve every page of the request.
"""

from __future__ import annotations

import pytest
import torch

from conformance.gates import GateTimeout
from conformance.scenarios.races import close_and_check_trace, served
from conformance.scenarios.workload import drive, request_data, request_tokens
from spec.config import TerminationConfig
from spec.trace import BACKUP, HOST, LOAD, WRITE_BACK_COPY, EventKind

PAGES = 4
SHARED = 2  # pages the splitting request shares with the first one
BATCH = 2


def copy_of(direction: str):
    def predicate(e) -> bool:
        return e.kind is EventKind.IO_START and e.value == direction and (direction != WRITE_BACK_COPY or e.space == HOST)
    return predicate


def loaded_whole(events, op: str, cache, tokens: int) -> bool:
    """Every load of `op` ended ok, and those of each pool holding every page (KV, an ALL_PAGES sidecar) cover all `tokens`."""
    loads = {e.io for e in events if e.kind is EventKind.IO_START and e.op == op and e.value == LOAD}
    ends = [e for e in events if e.kind is EventKind.IO_END and e.io in loads]
    every_page = [name for name, p in cache.pools.items() if p.unit == "token" and not p.window_tokens]
    covered = {pool: sum(len(e.slots) for e in ends if e.pool == pool) for pool in every_page}
    return bool(ends) and all(e.value for e in ends) and bool(covered) and all(n >= tokens for n in covered.values())


@pytest.mark.clause("L6", "L1", "S5", "F9", "S3")
@pytest.mark.parametrize("held", [
    pytest.param(None, id="before-the-ack"),
    pytest.param(WRITE_BACK_COPY, id="host-copy", marks=pytest.mark.needs("held_copies")),
    pytest.param(BACKUP, id="storage-backup", marks=pytest.mark.needs("stepped_backups")),
])
def test_a_node_split_under_its_backup_stores_every_page(impl, make_cache, trace, gate, device, page_size, held):
    if held == WRITE_BACK_COPY:
        if device != "cpu":
            pytest.skip(f"copies are held on the CPU copy stream; on {device} the copy stream cannot be paused by a gate")
    config = TerminationConfig(policy="wait_complete", page_size=page_size)
    writer = make_cache(termination=config, batch_pages=BATCH, write_policy="write_through")
    tokens = request_tokens(43, PAGES * page_size)
    data = request_data(writer, tokens, 43)
    cut = SHARED * page_size
    branch = list(tokens[:cut]) + request_tokens(44, (PAGES - SHARED) * page_size)
    fresh = request_data(writer, branch, 44)
    branch_data = {name: torch.cat([data[name][:cut], rows[cut:]]) if rows.shape[0] == len(branch) else rows for name, rows in fresh.items()}
    hold = gate.hold(f"the first {held} copy of the request", copy_of(held)) if held else None
    writer.write(tokens, data)
    if held is None:
        pass  # no step between the two writes: the host copy's ack is taken after the split, whenever the copy ran
    elif held == BACKUP:
        try:  # upstream starts the storage backup at a scheduler step after the host copy's ack
            hold.reached_stepping(lambda: writer.check_progress([]), rounds=10)
        except GateTimeout:
            if any(e.kind is EventKind.IO_START and e.value == BACKUP for e in trace.events()):
                raise
            hold.release()
            pytest.skip(f"{impl.name}'s scheduler steps start no storage backup (it starts them at flush): none can be held under a split")
    else:
        hold.wait_reached()
    writer.write(branch, branch_data)  # shares the first pages only: the request's node splits under its backup
    if hold is not None:
        hold.release()
    writer.flush()
    writer.evict_all()  # the trace judges the reader's slots next: the writer's tree gives its own back first
    writer.close()

    reader = make_cache(termination=config, batch_pages=BATCH)
    requested = reader.prefetch("r", tokens)
    assert requested == len(tokens), f"test setup: a fresh cache asked for {requested} of {len(tokens)} tokens"
    reader.wait_prefetch_io("r")
    committed = drive(reader, ["r"], trace=trace).get("r", 0)
    if committed < len(tokens) and loaded_whole(trace.events(), "r", reader, len(tokens)):
        # Storage served every page: what the backup stored is whole, and the shortfall is the reader's commit.
        raise AssertionError(f"L1: wait_complete committed {committed} of {len(tokens)} tokens although every IO succeeded "
                             f"(the fresh cache loaded every page of every pool from storage: the backup had stored them all)")
    assert committed == len(tokens), (
        f"L6: a fresh cache found {committed} of the {len(tokens)} tokens written through: the request's node split "
        f"{f'while its {held} copy was in flight' if held else 'before its host copy was acknowledged'}, and its backup "
        f"stored only part of what it was started for")
    served(reader, tokens, data, committed)
    close_and_check_trace(reader, trace, config)
