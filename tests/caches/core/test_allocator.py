"""PageAllocator: whole-page accounting, refusal of bad frees, concurrency."""

import random
import threading

import pytest
import torch

from caches.core.allocator import PageAllocator, SlotError


def assert_accounting(alloc, expected_allocated):
    assert alloc.allocated_slots() == expected_allocated
    assert alloc.free_slots() == alloc.capacity_slots - expected_allocated
    assert alloc.free_slots() + alloc.allocated_slots() == alloc.capacity_slots


def pages_of(slots, page_size):
    return sorted({int(s) // page_size for s in slots})


@pytest.mark.parametrize(
    "field, kwargs",
    [
        ("num_pages", {"num_pages": 0, "page_size": 4}),
        ("num_pages", {"num_pages": -2, "page_size": 4}),
        ("num_pages", {"num_pages": True, "page_size": 4}),
        ("num_pages", {"num_pages": 2.0, "page_size": 4}),
        ("page_size", {"num_pages": 2, "page_size": 0}),
        ("page_size", {"num_pages": 2, "page_size": False}),
        ("page_size", {"num_pages": 2, "page_size": "4"}),
    ],
)
def test_constructor_rejects_non_positive_ints(field, kwargs):
    with pytest.raises(ValueError, match=field):
        PageAllocator(**kwargs, name="kv")


def test_constructor_requires_a_name():
    with pytest.raises(ValueError, match="name"):
        PageAllocator(2, 4, name="")


def test_fresh_allocator_is_all_free():
    alloc = PageAllocator(5, 4, name="kv")
    assert alloc.capacity_slots == 20
    assert_accounting(alloc, 0)


def test_alloc_hands_out_whole_pages_lowest_first():
    alloc = PageAllocator(4, 4, name="kv")
    first = alloc.alloc(8)
    assert first.dtype == torch.int64
    assert first.tolist() == list(range(8))
    assert_accounting(alloc, 8)
    second = alloc.alloc(4)
    assert second.tolist() == [8, 9, 10, 11]
    assert_accounting(alloc, 12)


def test_alloc_is_all_or_nothing():
    alloc = PageAllocator(3, 2, name="kv")
    held = alloc.alloc(4)
    assert alloc.alloc(4) is None
    assert_accounting(alloc, 4)
    assert alloc.alloc(2).tolist() == [4, 5]
    assert alloc.alloc(2) is None
    alloc.free(held)
    assert_accounting(alloc, 2)


def test_alloc_zero_gives_an_empty_tensor():
    alloc = PageAllocator(1, 4, name="kv")
    empty = alloc.alloc(0)
    assert empty.dtype == torch.int64 and empty.numel() == 0
    assert_accounting(alloc, 0)


@pytest.mark.parametrize("num_slots", [3, 5, -4, True, 4.0])
def test_alloc_rejects_non_page_multiples(num_slots):
    alloc = PageAllocator(4, 4, name="kv")
    with pytest.raises(ValueError, match="num_slots"):
        alloc.alloc(num_slots)
    assert_accounting(alloc, 0)


def test_freed_pages_come_back_and_accounting_is_exact():
    alloc = PageAllocator(4, 2, name="kv")
    a = alloc.alloc(4)
    b = alloc.alloc(4)
    assert_accounting(alloc, 8)
    alloc.free(a)
    assert_accounting(alloc, 4)
    again = alloc.alloc(4)
    assert pages_of(again, 2) == pages_of(a, 2)
    assert_accounting(alloc, 8)
    alloc.free(b.tolist())
    alloc.free(tuple(again.tolist()))
    assert_accounting(alloc, 0)
    assert alloc.alloc(8).tolist() == list(range(8))


def test_free_accepts_pages_in_any_order():
    alloc = PageAllocator(3, 4, name="kv")
    slots = alloc.alloc(12).tolist()
    random.Random(3).shuffle(slots)
    alloc.free(torch.tensor(slots))
    assert_accounting(alloc, 0)


def test_free_of_nothing_is_a_no_op():
    alloc = PageAllocator(2, 2, name="kv")
    alloc.alloc(2)
    alloc.free([])
    alloc.free(torch.empty(0, dtype=torch.int64))
    assert_accounting(alloc, 2)


def test_double_free_names_allocator_and_slot():
    alloc = PageAllocator(4, 2, name="host_kv")
    slots = alloc.alloc(4)
    alloc.free(slots[:2])
    with pytest.raises(SlotError) as info:
        alloc.free(slots[:2])
    assert isinstance(info.value, ValueError)
    assert "host_kv" in str(info.value) and "slot 0" in str(info.value)
    assert "not allocated" in str(info.value)
    assert_accounting(alloc, 2)


def test_a_bad_page_in_a_free_frees_nothing():
    alloc = PageAllocator(4, 2, name="kv")
    held = alloc.alloc(4)
    never_allocated = [6, 7]
    with pytest.raises(SlotError, match="slot 6"):
        alloc.free(held.tolist() + never_allocated)
    assert_accounting(alloc, 4)
    alloc.free(held)
    assert_accounting(alloc, 0)


def test_partial_page_is_refused_with_the_missing_slot():
    alloc = PageAllocator(2, 4, name="kv")
    slots = alloc.alloc(8)
    with pytest.raises(SlotError) as info:
        alloc.free(slots[:6])
    assert "page 1" in str(info.value) and "slot 6" in str(info.value)
    assert_accounting(alloc, 8)
    # Same count as a page but straddling two pages.
    with pytest.raises(SlotError, match="part of page 0"):
        alloc.free(slots[2:6])
    assert_accounting(alloc, 8)


@pytest.mark.parametrize("slot", [-1, 8, 1000])
def test_out_of_range_slot_is_refused(slot):
    alloc = PageAllocator(2, 4, name="kv")
    alloc.alloc(8)
    with pytest.raises(SlotError) as info:
        alloc.free([slot])
    assert f"slot {slot}" in str(info.value) and "[0, 8)" in str(info.value)
    assert_accounting(alloc, 8)


def test_repeated_slot_within_one_free_is_refused():
    alloc = PageAllocator(2, 2, name="kv")
    alloc.alloc(4)
    with pytest.raises(SlotError, match="slot 0 appears more than once"):
        alloc.free([0, 1, 1, 0])
    assert_accounting(alloc, 4)


@pytest.mark.parametrize(
    "slots", [torch.tensor([0.0, 1.0]), torch.tensor([True, False]), [0.0, 1.0], ["a"]]
)
def test_non_integer_slots_are_refused(slots):
    alloc = PageAllocator(2, 2, name="kv")
    alloc.alloc(2)
    with pytest.raises(SlotError):
        alloc.free(slots)
    assert_accounting(alloc, 2)


def test_page_size_one_is_a_per_slot_allocator():
    alloc = PageAllocator(3, 1, name="mamba")
    first = alloc.alloc(1)
    second = alloc.alloc(2)
    assert first.tolist() == [0] and second.tolist() == [1, 2]
    alloc.free([1])
    assert_accounting(alloc, 2)
    assert alloc.alloc(1).tolist() == [1]
    with pytest.raises(SlotError, match="slot 0"):
        alloc.free([0, 0])


def test_concurrent_alloc_and_free_keep_exact_accounting():
    alloc = PageAllocator(64, 4, name="kv")
    owner = [None] * alloc.capacity_slots
    owner_lock = threading.Lock()
    num_threads = 6
    start = threading.Barrier(num_threads)
    failures = []

    def worker(index):
        rng = random.Random(index)
        held = []
        try:
            start.wait(timeout=10)
            for _ in range(300):
                if held and (rng.random() < 0.5 or len(held) > 4):
                    slots = held.pop(rng.randrange(len(held)))
                    with owner_lock:
                        for slot in slots.tolist():
                            owner[slot] = None
                    alloc.free(slots)
                    continue
                slots = alloc.alloc(4 * rng.randint(1, 3))
                if slots is None:
                    continue
                with owner_lock:
                    for slot in slots.tolist():
                        if owner[slot] is not None:
                            failures.append(f"slot {slot} handed to {index} and {owner[slot]}")
                        owner[slot] = index
                held.append(slots)
            for slots in held:
                with owner_lock:
                    for slot in slots.tolist():
                        owner[slot] = None
                alloc.free(slots)
        except Exception as exc:  # reported below with the thread's index
            failures.append(f"thread {index}: {exc!r}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(num_threads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    hung = [t.name for t in threads if t.is_alive()]
    assert not hung, f"allocator worker threads did not finish: {hung}"
    assert failures == []
    assert_accounting(alloc, 0)
    assert alloc.alloc(alloc.capacity_slots).tolist() == list(range(alloc.capacity_slots))
