"""Pins by each kind of holder: a prefetch hanging below a host-only node, a load-back making device room for its path.

A prefetch of a prefix whose head is on the host only attaches its pages
below the deepest backed-up node (its anchor) and pins it: host eviction
running while the prefetch loads must pass over it. Without the pin the
anchor leaves the tree with its host pages, and the commit hangs its pages
below a node nothing reaches: a hit reported that the tree cannot serve,
and host slots that never come back. The storage backup's pin and the
load-back's device lock are held in conformance/suite/test_fence.py.

A load-back whose path does not fit on the device makes room there first;
the host pages it is about to copy must stay where they are meanwhile.
"""

from __future__ import annotations

import pytest

from conformance.oracles.outcome import assert_loaded_writes
from conformance.scenarios.races import close_and_check_trace
from conformance.oracles.outcome import assert_loaded_bytes
from conformance.scenarios.races import stored_request
from conformance.scenarios.workload import assert_whole_commit, drive, pool_data, request_data, request_tokens, store
from spec.config import TerminationConfig
from spec.trace import HOST, LOAD, Event, EventKind, TraceRecorder

PAGES = 4
HEAD = 2  # pages of the prefix on the host only: the anchor


def host_pages_freed(events, inserted_by: str, first: int, before: int | None = None) -> list[Event]:
    """Frees of the host KV slots `inserted_by` committed, from trace position `first` on and before `before`."""
    inserted = {slot for e in events if e.kind is EventKind.INSERT and e.op == inserted_by and e.pool == "kv" for slot in e.slots}
    before = len(events) if before is None else before
    return [e for e in events if first <= e.seq < before and e.kind is EventKind.FREE and e.space == HOST and e.pool == "kv"
            and inserted.intersection(e.slots)]


def anchor_pages_freed(events, anchor_op: str, op: str) -> list[Event]:
    """Frees of the host KV slots `anchor_op` inserted, after `op` started and before it committed."""
    started = next(e.seq for e in events if e.kind is EventKind.OP_START and e.op == op)
    ended = next((e.seq for e in events if e.kind is EventKind.COMMIT and e.op == op), len(events))
    return host_pages_freed(events, anchor_op, started + 1, ended)


@pytest.mark.clause("F8", "S1", "S3", "S5")
@pytest.mark.parametrize("policy", ["wait_complete", "best_effort"])
def test_host_eviction_spares_the_anchor_of_a_running_prefetch(impl, make_cache, trace, gate, policy, page_size):
    config = TerminationConfig(policy=policy, page_size=page_size)
    cache = make_cache(termination=config, batch_pages=2)
    tokens = request_tokens(84, PAGES * page_size)
    head = tokens[: HEAD * page_size]
    data = request_data(cache, tokens, 84)
    # The head stored on its own too, with the state a prefix of its length ends with: a prefetch of it can end a match.
    head_data = {**{k: v[: len(head)] for k, v in data.items() if cache.pools[k].unit != "state"},
                 **pool_data([p for p in cache.pools.values() if p.unit == "state"], len(head), 85)}
    store(cache, head, head_data)
    store(cache, tokens, data)
    assert cache.prefetch("r0", head) == len(head)
    cache.wait_prefetch_io("r0")
    assert_whole_commit(drive(cache, ["r0"], trace=trace), "r0", len(head), "the head loaded whole")
    if cache.match(head) != (0, len(head)):
        pytest.skip(f"{impl.name} keeps no committed prefetch on the host only (match {cache.match(head)}): no host-only anchor")
    loading = gate.hold("the first load of the prefetch below the anchor", lambda e: e.kind is EventKind.IO_START and e.op == "r1" and e.value == LOAD)
    requested = cache.prefetch("r1", tokens)
    if requested != len(tokens) - len(head):
        loading.release()
        pytest.skip(f"{impl.name} prefetched {requested} of {len(tokens)} tokens, not the {len(tokens) - len(head)} below the host-only head")
    loading.wait_reached()
    cache.evict_all()  # host eviction while the prefetch hangs below the head: the head must stay
    loading.release()
    taken = anchor_pages_freed(trace.events(), "r0", "r1")
    if taken:
        raise AssertionError(
        f"F8: host eviction freed the host pages of r1's anchor (the head r0 committed: slots {taken[0].slots[:8]} at #{taken[0].seq}) "
        f"while r1 still loaded the pages below it (its pin ignored): its commit can only go below a node the tree no longer holds, "
        f"a hit no match serves and slots that never return")
    cache.wait_prefetch_io("r1")
    committed = drive(cache, ["r1"], trace=trace)["r1"]
    device, host = cache.match(tokens)
    assert device + host == len(head) + committed, (
        f"F8: r1 committed {committed} tokens below its {len(head)}-token host anchor, yet the tree serves {device + host} of the prefix: "
        f"host eviction took the anchor while the prefetch hung below it (its pin ignored), and the commit went below a node the tree no longer holds")
    assert_loaded_writes(cache, cache.load_back(tokens), {len(head): head_data, len(tokens): data})
    cache.evict_all()
    close_and_check_trace(cache, trace, config, host_slots_left=0)


@pytest.mark.clause("S3", "S5", "F8")
def test_room_made_on_the_device_for_a_load_back_keeps_its_host_pages(impl, make_cache, trace, clock, tmp_path, profile, page_size):
    """The device holds another prefix, written and not backed up; loading a host-only prefix back must make room by taking it.

    Another server stored the prefix; this one backs a prefix up only once it
    was hit twice, so the prefix it writes has no host copy, and its host
    tier holds nothing but the prefix it prefetched.
    """
    config = TerminationConfig(policy="wait_complete", page_size=page_size)
    shared = tmp_path / "shared-storage"
    writer = make_cache(termination=config, storage_dir=shared, trace=TraceRecorder(clock, profile=profile.id))
    tokens, data = stored_request(writer, seed=91, pages=PAGES, page_size=page_size)
    writer.close()
    cache = make_cache(termination=config, storage_dir=shared, batch_pages=2, device_pages=PAGES, write_policy="write_through_selective")
    assert cache.prefetch("r0", tokens) == len(tokens)
    cache.wait_prefetch_io("r0")
    assert_whole_commit(drive(cache, ["r0"], trace=trace), "r0", len(tokens), "every page loaded")
    other = request_tokens(92, PAGES * page_size)
    cache.write(other, request_data(cache, other, 92))  # the device is full now, of a prefix with no backup
    mark = trace.position()
    try:
        loaded = cache.load_back(tokens)
    finally:
        taken = host_pages_freed(trace.events(), "r0", mark)
        if taken:
            raise AssertionError(f"S3: making device room for the load-back of r0's prefix freed the host pages it was about to copy "
                           f"(slots {taken[0].slots[:8]} at #{taken[0].seq}): the load-back read slots nobody holds")
    assert_loaded_bytes(cache, loaded, data, len(tokens))
    close_and_check_trace(cache, trace, config)
