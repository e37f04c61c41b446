"""Which page is damaged: first or last of a prefix or a window, by the order it was written and by its key.

A page that vanishes from storage, or whose bytes rot, after the existence
check comes back from the get as a miss. Where it sits decides what a bug
can hide behind: a loop that stops at the first miss handles a missing
first page correctly and counts a window loaded when only its leading
pages arrived; a test that always damages the same page (the one a sorted
file list happens to put last) passes both. Each position, each damage,
each pool the implementation loads by page: KV and its ALL_PAGES side pools
are committed no further than their first page that did not arrive (F3), a
window is attached whole or not at all (F10), and whatever is served holds
the stored bytes (S5).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.oracles.outcome import assert_loaded_bytes
from conformance.scenarios.races import close_and_check_trace, op_events, page_write_keys, stored_request
from conformance.scenarios.workload import drive
from spec.config import TerminationConfig
from spec.fence import HitPolicy, window_pages
from spec.trace import LOAD, EventKind

PAGES = 4
POSITIONS = ["first_written", "last_written", "lowest_key", "highest_key"]
POOLS = ["kv", *(pytest.param(p, marks=pytest.mark.needs(f"default_pool:{p}")) for p in ("indexer", "swa"))]


def remove(path: Path) -> None:
    path.unlink()


def flip_last_byte(path: Path) -> None:
    """Bit rot in the payload (the last byte, in any layout that puts a header first), the length unchanged."""
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 0x01
    path.write_bytes(bytes(raw))


def truncate(path: Path) -> None:
    """A torn write: the file cut to half its length (its header, in any layout that puts one first, intact)."""
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])


def append_byte(path: Path) -> None:
    """A write that ran past the page: one byte more than was stored."""
    path.write_bytes(path.read_bytes() + b"\x00")


DAMAGES = {"removed": remove, "bit_flip": flip_last_byte, "truncated": truncate, "appended": append_byte}


def chosen(keys: list[str], position: str) -> str:
    return {"first_written": keys[0], "last_written": keys[-1], "lowest_key": min(keys), "highest_key": max(keys)}[position]


@pytest.mark.clause("F3", "F10", "F11", "S5", "S7")
@pytest.mark.parametrize("damage", sorted(DAMAGES))
@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("pool", POOLS)
def test_a_page_damaged_after_the_existence_check(impl, make_cache, trace, gate, tmp_path, pool, position, damage, page_size):
    config = TerminationConfig(policy="wait_complete", page_size=page_size)
    cache = make_cache(termination=config, batch_pages=2)
    tokens, data = stored_request(cache, seed=86, pages=PAGES, page_size=page_size)
    keys = list(dict.fromkeys(page_write_keys(trace, pool)))  # in the order written, each once
    if len(keys) < 2:
        pytest.skip(f"{impl.name} stored {len(keys)} page(s) of pool {pool}: no first and last to tell apart")
    if len(keys) > PAGES:
        pytest.skip(f"{impl.name} recorded {len(keys)} page keys of pool {pool} for a {PAGES}-page request: no page's place in it is known")
    key = chosen(keys, position)
    files = [p for p in (tmp_path / "storage").rglob("*") if p.is_file() and p.name.endswith(key) and not p.name.startswith(".")]
    if len(files) != 1:
        pytest.skip(f"{impl.name} keeps no single file named after page key {key[:16]}... ({len(files)} found)")
    started = gate.hold("the first load (after the existence check)", lambda e: e.kind is EventKind.IO_START and e.op == "r1" and e.value == LOAD)
    assert cache.prefetch("r1", tokens) == len(tokens)
    started.wait_reached()
    DAMAGES[damage](files[0])
    started.release()
    cache.wait_prefetch_io("r1")
    committed = drive(cache, ["r1"], trace=trace)["r1"]
    layout = cache.pools[pool]
    what = f"page {keys.index(key) + 1} of {len(keys)} written of pool {pool} ({position}, {damage})"
    page = PAGES - len(keys) + keys.index(key)  # the damaged page's place in the request (a pool stores its trailing pages)
    if layout.hit_policy is HitPolicy.TRAILING_WINDOW:
        # Only the window's pages are read: a pool storing every page of the prefix needs none before the window.
        attached = [e for e in op_events(trace, "r1", EventKind.INSERT) if e.pool == pool]
        if page >= PAGES - window_pages(layout.window_tokens, page_size):
            # A page that is gone is F10's; one whose bytes changed arrived, and serving it is S7's, as for KV.
            clause = "F10" if damage == "removed" else "S7"
            assert not attached, f"{clause}: a window of which {what} was attached ({attached[0].describe()})"
    else:
        usable = page * page_size  # pages before the damaged one, in request order
        if damage == "removed":
            assert committed <= usable, f"F3: committed {committed} tokens though {what} did not arrive: at most {usable} were usable"
        else:  # a damaged page is a miss for it and every later page; the ones before it still load
            assert committed == usable, (f"S7: committed {committed} tokens where the {usable} before the damaged page were stored intact: "
                                         f"{what} must be a miss for that page and every later one, and only for those")
    loaded = cache.load_back(tokens)
    try:
        assert_loaded_bytes(cache, loaded, data, len(tokens))
    except AssertionError as exc:
        if damage == "bit_flip" and str(exc).startswith("S5: "):
            raise AssertionError(f"S7: {what} was served as data: {str(exc)[4:]}") from None
        raise
    close_and_check_trace(cache, trace, config)


HEADER_BYTES = 48  # a header, in any layout that puts one first, and the start of the payload


@pytest.mark.clause("S7", "S5", "F3")
def test_any_one_damaged_byte_near_the_start_of_a_page_file(impl, make_cache, trace, tmp_path, page_size):
    """Each of the first bytes of the second page's file damaged in turn, two ways: a miss for that page and every later one.

    Whatever the byte holds (a header field, the payload), the page changed
    after it was written: it is a miss, the page before it still loads, and
    nothing served differs from what was stored.
    """
    config = TerminationConfig(policy="wait_complete", page_size=page_size)
    cache = make_cache(termination=config, batch_pages=2)
    tokens, data = stored_request(cache, seed=93, pages=PAGES, page_size=page_size)
    key = list(dict.fromkeys(page_write_keys(trace, "kv")))[1]
    files = [p for p in (tmp_path / "storage").rglob("*") if p.is_file() and p.name.endswith(key) and not p.name.startswith(".")]
    if len(files) != 1:
        pytest.skip(f"{impl.name} keeps no single file named after page key {key[:16]}... ({len(files)} found)")
    intact = files[0].read_bytes()
    for offset in range(min(HEADER_BYTES, len(intact))):
        for mask in (0x01, 0x03):
            damaged = bytearray(intact)
            damaged[offset] ^= mask
            files[0].write_bytes(bytes(damaged))
            request = f"r{offset}-{mask}"
            committed = 0
            if cache.prefetch(request, tokens):
                cache.wait_prefetch_io(request)
                committed = drive(cache, [request], trace=trace)[request]
            what = f"byte {offset} of page 2's file XOR {mask:#04x}"
            assert committed == page_size, (
                f"S7: committed {committed} tokens with {what}: the damaged page is a miss for it and every later one, "
                f"and only for those ({page_size} tokens: page 1)")
            try:
                assert_loaded_bytes(cache, cache.load_back(tokens), data, len(tokens))
            except AssertionError as exc:
                if not str(exc).startswith("S5:"):
                    raise  # not the bytes (a window or a state missing): that clause broke, whatever the damage
                raise AssertionError(f"S7: with {what}, bytes that differ from the stored ones were served: {exc}") from None
            cache.evict_all()  # the next round reads storage again
    files[0].write_bytes(intact)
    close_and_check_trace(cache, trace, config)
