"""RadixTree: paged matching, insertion, tiers, pins, eviction and invariants."""

import random

import pytest
import torch
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from caches.core.allocator import PageAllocator
from caches.core.hashing import page_hashes
from caches.core.tree import (
    RadixTree,
    TreeInvariantError,
    TreeNode,
    TreeUsageError,
)
from conformance.implementations import devices

PS = 2


def span(start, length):
    return torch.arange(start, start + length, dtype=torch.int64)


def no_callback(node):
    raise AssertionError(f"unexpected callback for {node!r}")


def backup(tree, node, start=1000):
    tree.set_host_value(node, span(start, len(node.key)))


def demote_all(tree):
    demoted = []
    tree.evict(10**9, on_demote=demoted.append, on_delete=no_callback)
    return demoted


# -- construction and input checks ---------------------------------------------


@pytest.mark.parametrize("page_size", [0, -1, True, 2.0])
def test_page_size_must_be_positive_int(page_size):
    with pytest.raises(ValueError, match="page_size"):
        RadixTree(page_size)


def test_empty_tree_has_only_a_resident_backed_up_root():
    tree = RadixTree(PS)
    assert tree.node_count() == 0
    assert not tree.root.evicted and tree.root.backuped
    assert tree.device_tokens() == tree.host_tokens() == 0
    tree.check_invariants()


def test_insert_rejects_misaligned_tokens_and_wrong_slot_counts():
    tree = RadixTree(PS)
    with pytest.raises(TreeUsageError, match="multiple of page_size 2"):
        tree.insert([1, 2, 3], span(0, 3))
    with pytest.raises(TreeUsageError, match="device_slots"):
        tree.insert([1, 2, 3, 4], span(0, 2))
    with pytest.raises(TreeUsageError, match="device_slots"):
        tree.insert([1, 2], torch.tensor([0.0, 1.0]))
    with pytest.raises(TreeUsageError, match="hashes"):
        tree.insert([1, 2], span(0, 2), hashes=["a", "b"])
    with pytest.raises(TreeUsageError, match="shape"):
        tree.insert(torch.tensor([[1, 2]]), span(0, 2))
    assert issubclass(TreeUsageError, ValueError)
    assert tree.node_count() == 0
    tree.check_invariants()


def test_bad_token_id_leaves_an_evicted_path_untouched():
    tree = RadixTree(PS)
    node = tree.insert([1, 2], span(0, 2)).node
    backup(tree, node)
    demote_all(tree)
    with pytest.raises(ValueError, match="-5"):
        tree.insert([1, 2, 3, -5], span(10, 4))
    assert node.evicted and tree.device_tokens() == 0 and tree.node_count() == 1
    tree.check_invariants()


# -- match -----------------------------------------------------------------------


def test_match_on_empty_tree():
    tree = RadixTree(PS)
    result = tree.match_prefix([1, 2, 3, 4])
    assert result.device_slots.dtype == torch.int64 and result.device_slots.numel() == 0
    assert result.device_node is tree.root and result.host_node is tree.root
    assert result.matched_tokens == result.host_hit_tokens == 0


def test_partial_trailing_page_never_matches():
    tree = RadixTree(PS)
    tree.insert([1, 2, 3, 4], span(0, 4))
    result = tree.match_prefix([1, 2, 3])
    assert result.device_slots.tolist() == [0, 1]
    assert result.matched_tokens == 2
    assert tree.match_prefix([1]).matched_tokens == 0
    # Diverging inside the first page is no match at all.
    assert tree.match_prefix([1, 9, 3, 4]).matched_tokens == 0


def test_match_ending_inside_a_node_splits_it_at_the_page_boundary():
    tree = RadixTree(PS)
    tree.insert([1, 2, 3, 4, 5, 6, 7, 8], span(10, 8))
    result = tree.match_prefix([1, 2, 3, 4, 9, 9])
    assert result.device_slots.tolist() == [10, 11, 12, 13]
    assert result.device_node.key == (1, 2, 3, 4)
    assert result.device_node.hash_value == page_hashes([1, 2, 3, 4], PS)
    tail = result.device_node.children[(5, 6)]
    assert tail.key == (5, 6, 7, 8) and tail.value.tolist() == [14, 15, 16, 17]
    assert tree.node_count() == 2
    tree.check_invariants(verify_hashes=True)
    # A query that stops early splits as well.
    assert tree.match_prefix([1, 2]).device_node.key == (1, 2)
    assert tree.node_count() == 3
    tree.check_invariants(verify_hashes=True)


def test_full_match_concatenates_device_slots_along_the_path():
    tree = RadixTree(PS)
    tree.insert([1, 2, 3, 4], span(0, 4))
    tree.insert([1, 2, 3, 4, 5, 6], span(20, 6))
    result = tree.match_prefix([1, 2, 3, 4, 5, 6, 7])
    assert result.device_slots.tolist() == [0, 1, 2, 3, 24, 25]
    assert result.matched_tokens == 6 and result.host_hit_tokens == 0
    assert result.host_node is result.device_node
    assert result.device_node.key == (5, 6)


@pytest.mark.parametrize("kind", [list, tuple, torch.tensor])
def test_match_accepts_lists_tuples_and_tensors(kind):
    tree = RadixTree(PS)
    tree.insert(kind([4, 5, 6, 7]), span(0, 4))
    assert tree.match_prefix(kind([4, 5, 6, 7])).device_slots.tolist() == [0, 1, 2, 3]


def test_match_touches_the_path_with_increasing_logical_ticks():
    tree = RadixTree(PS)
    a = tree.insert([1, 2], span(0, 2)).node
    b = tree.insert([3, 4], span(2, 2)).node
    assert b.last_access > a.last_access
    tree.match_prefix([1, 2])
    assert a.last_access > b.last_access
    assert tree.root.last_access == a.last_access


def test_device_and_host_hits():
    tree = RadixTree(PS)
    head = tree.insert([1, 2, 3, 4], span(0, 4)).node
    tail = tree.insert([1, 2, 3, 4, 5, 6], span(0, 6)).node
    assert tail.parent is head
    backup(tree, head, 100)
    backup(tree, tail, 200)
    tree.evict(2, on_demote=lambda n: None, on_delete=no_callback)
    assert tail.evicted and not head.evicted

    result = tree.match_prefix([1, 2, 3, 4, 5, 6])
    assert result.device_slots.tolist() == [0, 1, 2, 3]
    assert result.device_node is head and result.host_node is tail
    assert result.host_hit_tokens == 2 and result.matched_tokens == 6
    assert result.device_hit_tokens == 4
    assert result.deepest_backed_up_node is tail

    demote_all(tree)
    result = tree.match_prefix([1, 2, 3, 4, 5, 6, 7, 8])
    assert result.device_slots.numel() == 0 and result.device_node is tree.root
    assert result.host_node is tail and result.host_hit_tokens == 6

    tree.set_device_value(head, span(40, 4))
    result = tree.match_prefix([1, 2, 3, 4, 5, 6])
    assert result.device_slots.tolist() == [40, 41, 42, 43] and result.host_hit_tokens == 2
    tree.check_invariants()


def test_deepest_backed_up_node_stops_at_the_first_node_without_backup():
    tree = RadixTree(PS)
    head = tree.insert([1, 2], span(0, 2)).node
    tree.insert([1, 2, 3, 4], span(0, 4))
    backup(tree, head)
    result = tree.match_prefix([1, 2, 3, 4])
    assert result.device_node.key == (3, 4)
    assert result.deepest_backed_up_node is head


def test_host_split_keeps_host_slots_and_hashes_consistent():
    tree = RadixTree(PS)
    node = tree.insert([1, 2, 3, 4, 5, 6], span(0, 6)).node
    backup(tree, node, 300)
    demote_all(tree)
    result = tree.match_prefix([1, 2, 3, 4])
    head = result.host_node
    assert head.key == (1, 2, 3, 4) and head.host_value.tolist() == [300, 301, 302, 303]
    assert node.host_value.tolist() == [304, 305] and node.parent is head
    assert result.host_hit_tokens == 4
    tree.check_invariants(verify_hashes=True)


# -- insert ---------------------------------------------------------------------


def test_insert_new_sequence_owns_a_copy_of_the_slots():
    tree = RadixTree(PS)
    given = span(0, 4)
    result = tree.insert([1, 2, 3, 4], given)
    given[0] = 99
    assert result.prefix_len == 0 and result.duplicate_slots.numel() == 0
    assert result.new_node is result.node and result.node.value.tolist() == [0, 1, 2, 3]
    assert tree.device_tokens() == 4 and tree.host_tokens() == 0


def test_insert_returns_duplicate_slots_for_the_part_already_on_device():
    tree = RadixTree(PS)
    first = tree.insert([1, 2, 3, 4], span(0, 4)).node
    result = tree.insert([1, 2, 3, 4, 5, 6], span(10, 6))
    assert result.prefix_len == 4
    assert result.duplicate_slots.tolist() == [10, 11, 12, 13]
    assert result.existing_nodes == [first]
    assert result.node.value.tolist() == [14, 15] and result.node.parent is first
    assert tree.device_tokens() == 6
    again = tree.insert([1, 2, 3, 4, 5, 6], span(30, 6))
    assert again.prefix_len == 6 and again.new_node is None
    assert again.duplicate_slots.tolist() == list(range(30, 36))
    assert again.node is result.node
    tree.check_invariants(verify_hashes=True)


def test_insert_diverging_inside_a_node_splits_it():
    tree = RadixTree(PS)
    tree.insert([1, 2, 3, 4, 5, 6], span(0, 6))
    result = tree.insert([1, 2, 3, 4, 7, 8], span(10, 6))
    assert result.prefix_len == 4 and result.duplicate_slots.tolist() == [10, 11, 12, 13]
    head = result.node.parent
    assert head.key == (1, 2, 3, 4) and set(head.children) == {(5, 6), (7, 8)}
    assert tree.node_count() == 3 and tree.device_tokens() == 8
    tree.check_invariants(verify_hashes=True)


def test_insert_restores_a_present_but_evicted_node_from_the_new_slots():
    tree = RadixTree(PS)
    node = tree.insert([1, 2, 3, 4], span(0, 4)).node
    backup(tree, node, 500)
    demote_all(tree)
    assert tree.device_tokens() == 0
    result = tree.insert([1, 2, 3, 4, 5, 6], span(50, 6))
    assert result.prefix_len == 0 and result.duplicate_slots.numel() == 0
    assert result.restored_nodes == [node] and node.value.tolist() == [50, 51, 52, 53]
    assert node.host_value.tolist() == [500, 501, 502, 503]
    assert tree.device_tokens() == 6
    tree.check_invariants()


def test_insert_hashes_chain_from_the_parent_or_are_taken_as_given():
    tree = RadixTree(PS)
    tree.insert([1, 2, 3, 4], span(0, 4))
    node = tree.insert([1, 2, 3, 4, 5, 6, 7, 8], span(0, 8)).node
    assert node.hash_value == page_hashes([1, 2, 3, 4, 5, 6, 7, 8], PS)[2:]
    given = ["h1", "h2"]
    other = tree.insert([9, 9, 8, 8], span(0, 4), hashes=given).node
    assert other.hash_value == given and other.hash_value is not given


def test_empty_insert_returns_the_root():
    tree = RadixTree(PS)
    result = tree.insert([], [])
    assert result.node is tree.root and result.prefix_len == 0


# -- insert_host -------------------------------------------------------------------


def test_insert_host_attaches_a_host_only_node():
    tree = RadixTree(PS)
    tokens = [1, 2, 3, 4]
    hashes = page_hashes(tokens, PS)
    result = tree.insert_host(tree.root, tokens, span(700, 4), hashes)
    node = result.node
    assert result.new_node is node and node.evicted and node.backuped
    assert node.host_value.tolist() == [700, 701, 702, 703] and node.hash_value == hashes
    assert tree.host_tokens() == 4 and tree.device_tokens() == 0
    match = tree.match_prefix(tokens)
    assert match.host_hit_tokens == 4 and match.host_node is node
    tree.check_invariants(verify_hashes=True)


def test_insert_host_returns_duplicates_and_adopts_device_only_nodes():
    tree = RadixTree(PS)
    base = tree.insert([1, 2], span(0, 2)).node
    backup(tree, base, 100)
    device_only = tree.insert([1, 2, 3, 4, 5, 6], span(0, 6)).node
    tokens = [3, 4, 5, 6, 7, 8]
    hashes = page_hashes([1, 2, *tokens], PS)[1:]
    result = tree.insert_host(base, tokens, span(800, 6), hashes)
    assert result.restored_nodes == [device_only]
    assert device_only.host_value.tolist() == [800, 801, 802, 803]
    assert result.new_node.key == (7, 8) and result.new_node.host_value.tolist() == [804, 805]
    again = tree.insert_host(base, tokens, span(900, 6), hashes)
    assert again.prefix_len == 6 and again.duplicate_slots.tolist() == list(range(900, 906))
    assert again.existing_nodes == [device_only, result.new_node]
    assert tree.host_tokens() == 2 + 6
    tree.check_invariants(verify_hashes=True)


def test_insert_host_refuses_a_parent_without_backup_or_outside_the_tree():
    tree = RadixTree(PS)
    node = tree.insert([1, 2], span(0, 2)).node
    hashes = page_hashes([1, 2, 3, 4], PS)[1:]
    with pytest.raises(TreeUsageError, match="not backed up"):
        tree.insert_host(node, [3, 4], span(0, 2), hashes)
    stray = TreeNode(-1, (1, 2), None)
    with pytest.raises(TreeUsageError, match="not in this tree"):
        tree.insert_host(stray, [3, 4], span(0, 2), hashes)
    with pytest.raises(TreeUsageError, match="hashes"):
        tree.insert_host(tree.root, [3, 4], span(0, 2), [])
    assert tree.host_tokens() == 0 and tree.node_count() == 1


# -- split ----------------------------------------------------------------------


def test_split_keeps_values_hashes_locks_and_hands_ext_to_the_callback():
    calls = []

    def on_split(head, tail):
        calls.append((head, tail))
        head.ext["state"] = None  # a trailing-page state stays with the tail
        tail.ext["split_seen"] = True

    tree = RadixTree(PS, on_split=on_split)
    node = tree.insert([1, 2, 3, 4, 5, 6], span(0, 6)).node
    backup(tree, node, 60)
    node.ext["state"] = 7
    tree.lock(node)
    tree.pin_host(node)
    node.hit_count = 3
    head = tree.split(node, 4)
    assert calls == [(head, node)]
    assert head.key == (1, 2, 3, 4) and node.key == (5, 6) and node.parent is head
    assert head.value.tolist() == [0, 1, 2, 3] and node.value.tolist() == [4, 5]
    assert head.host_value.tolist() == [60, 61, 62, 63] and node.host_value.tolist() == [64, 65]
    assert head.lock_ref == node.lock_ref == 1
    assert node.host_ref == 1 and head.host_ref == 0
    assert head.hit_count == 3 and head.last_access == node.last_access
    assert node.ext == {"state": 7, "split_seen": True} and head.ext == {"state": None}
    tree.check_invariants(verify_hashes=True)
    tree.unlock(node)
    assert head.lock_ref == node.lock_ref == tree.root.lock_ref == 0


@pytest.mark.parametrize("at", [0, 1, 3, 6, 8, -2, True])
def test_split_point_must_be_inside_and_page_aligned(at):
    tree = RadixTree(PS)
    node = tree.insert([1, 2, 3, 4, 5, 6], span(0, 6)).node
    with pytest.raises(TreeUsageError, match="at is"):
        tree.split(node, at)
    assert tree.node_count() == 1


def test_root_cannot_be_split():
    tree = RadixTree(PS)
    with pytest.raises(TreeUsageError, match="root"):
        tree.split(tree.root, 2)


# -- pins -----------------------------------------------------------------------


def test_lock_propagates_to_the_root_and_unlock_undoes_it():
    tree = RadixTree(PS)
    head = tree.insert([1, 2], span(0, 2)).node
    tail = tree.insert([1, 2, 3, 4], span(0, 4)).node
    tree.lock(tail)
    tree.lock(head)
    assert (tail.lock_ref, head.lock_ref, tree.root.lock_ref) == (1, 2, 2)
    tree.check_invariants()
    tree.unlock(tail)
    tree.unlock(head)
    assert (tail.lock_ref, head.lock_ref, tree.root.lock_ref) == (0, 0, 0)


def test_unlock_below_zero_raises_and_changes_nothing():
    tree = RadixTree(PS)
    head = tree.insert([1, 2], span(0, 2)).node
    tail = tree.insert([1, 2, 3, 4], span(0, 4)).node
    tree.lock(head)
    with pytest.raises(TreeUsageError, match="below zero"):
        tree.unlock(tail)
    assert (tail.lock_ref, head.lock_ref, tree.root.lock_ref) == (0, 1, 1)


def test_lock_of_a_deleted_node_is_refused():
    tree = RadixTree(PS)
    node = tree.insert([1, 2], span(0, 2)).node
    tree.evict(2, on_demote=no_callback, on_delete=lambda n: None)
    with pytest.raises(TreeUsageError, match="not in this tree"):
        tree.lock(node)
    assert tree.root.lock_ref == 0


def test_host_pin_counts_on_the_node_only():
    tree = RadixTree(PS)
    head = tree.insert([1, 2], span(0, 2)).node
    tail = tree.insert([1, 2, 3, 4], span(0, 4)).node
    with pytest.raises(TreeUsageError, match="no host data"):
        tree.pin_host(tail)
    backup(tree, head)
    backup(tree, tail, 10)
    tree.pin_host(tail)
    tree.pin_host(tail)
    assert tail.host_ref == 2 and head.host_ref == 0
    tree.unpin_host(tail)
    tree.unpin_host(tail)
    with pytest.raises(TreeUsageError, match="below zero"):
        tree.unpin_host(tail)
    assert tail.host_ref == 0


# -- device eviction --------------------------------------------------------------------


def test_evict_takes_least_recently_used_leaves_first():
    tree = RadixTree(PS)
    a = tree.insert([1, 1], span(0, 2)).node
    b = tree.insert([2, 2], span(2, 2)).node
    c = tree.insert([3, 3], span(4, 2)).node
    tree.match_prefix([1, 1])
    deleted = []
    assert tree.evict(2, on_demote=no_callback, on_delete=deleted.append) == 2
    assert deleted == [b]
    assert tree.evict(3, on_demote=no_callback, on_delete=deleted.append) == 4
    assert deleted == [b, c, a]
    assert tree.node_count() == 0 and tree.device_tokens() == 0
    tree.check_invariants()


def test_evict_ties_break_by_node_age():
    tree = RadixTree(PS)
    a = tree.insert([1, 1], span(0, 2)).node
    b = tree.insert([2, 2], span(2, 2)).node
    tree.match_prefix([3, 3, 1, 1])  # touches nothing but the root
    b.last_access = a.last_access
    deleted = []
    tree.evict(2, on_demote=no_callback, on_delete=deleted.append)
    assert deleted == [a]


def test_evict_demotes_backed_up_nodes_and_deletes_the_others():
    tree = RadixTree(PS)
    kept = tree.insert([1, 2], span(0, 2)).node
    dropped = tree.insert([3, 4], span(2, 2)).node
    backup(tree, kept, 50)
    freed = []

    def on_demote(node):
        assert node.value is not None  # called before the tree drops the slots
        freed.append(("demote", node, node.value.tolist()))

    def on_delete(node):
        assert node.parent is tree.root
        freed.append(("delete", node, node.value.tolist()))

    assert tree.evict(4, on_demote=on_demote, on_delete=on_delete) == 4
    assert freed == [("demote", kept, [0, 1]), ("delete", dropped, [2, 3])]
    assert kept.evicted and kept.parent is tree.root and (3, 4) not in tree.root.children
    assert dropped.parent is None
    assert tree.device_tokens() == 0 and tree.host_tokens() == 2
    tree.check_invariants()


def test_evict_cascades_to_parents_that_become_leaves():
    tree = RadixTree(PS)
    tree.insert([1, 2, 3, 4], span(0, 4))
    tree.insert([1, 2, 5, 6], span(4, 4))
    tree.insert([1, 2, 7, 8], span(8, 4))
    assert tree.node_count() == 4
    deleted = []
    assert tree.evict(8, on_demote=no_callback, on_delete=deleted.append) == 8
    assert [n.key for n in deleted] == [(3, 4), (5, 6), (7, 8), (1, 2)]
    assert tree.node_count() == 0


def test_evict_spares_locked_nodes_and_their_ancestors():
    tree = RadixTree(PS)
    locked = tree.insert([1, 2, 3, 4], span(0, 4)).node
    other = tree.insert([1, 2, 5, 6], span(4, 4)).node
    tree.lock(locked)
    deleted = []
    assert tree.evict(100, on_demote=no_callback, on_delete=deleted.append) == 2
    assert deleted == [other]
    assert tree.device_tokens() == 4
    tree.unlock(locked)
    assert tree.evict(100, on_demote=no_callback, on_delete=deleted.append) == 4


def test_evict_honours_the_extra_predicate_and_stops_when_enough():
    tree = RadixTree(PS)
    for first in range(1, 5):
        tree.insert([first, first], span(2 * first, 2))
    deleted = []
    evicted = tree.evict(
        3,
        on_demote=no_callback,
        on_delete=deleted.append,
        can_evict=lambda node: node.key != (1, 1),
    )
    assert evicted == 4 and [n.key for n in deleted] == [(2, 2), (3, 3)]
    assert tree.evict(0, on_demote=no_callback, on_delete=no_callback) == 0
    with pytest.raises(TreeUsageError, match="num_tokens"):
        tree.evict(-1, on_demote=no_callback, on_delete=no_callback)


def test_a_failing_callback_leaves_the_node_intact():
    tree = RadixTree(PS)
    node = tree.insert([1, 2], span(0, 2)).node

    def refuse(node):
        raise RuntimeError("cannot free yet")

    with pytest.raises(RuntimeError, match="cannot free yet"):
        tree.evict(2, on_demote=no_callback, on_delete=refuse)
    assert node.parent is tree.root and tree.device_tokens() == 2
    tree.check_invariants()


# -- host eviction -----------------------------------------------------------------------


def host_only_tree():
    tree = RadixTree(PS)
    head = tree.insert([1, 2], span(0, 2)).node
    left = tree.insert([1, 2, 3, 4], span(0, 4)).node
    right = tree.insert([1, 2, 5, 6], span(4, 4)).node
    backup(tree, head, 100)
    backup(tree, left, 102)
    backup(tree, right, 104)
    return tree, head, left, right


def test_evict_host_deletes_host_only_leaves_lru_and_cascades():
    tree, head, left, right = host_only_tree()
    # Still on the device: nothing is a host-only leaf yet.
    assert tree.evict_host(100, on_delete=no_callback) == 0
    demote_all(tree)
    tree.match_prefix([1, 2, 3, 4])
    deleted = []
    assert tree.evict_host(2, on_delete=deleted.append) == 2
    assert deleted == [right]
    assert tree.evict_host(100, on_delete=deleted.append) == 4
    assert deleted == [right, left, head]
    assert tree.node_count() == 0 and tree.host_tokens() == 0
    tree.check_invariants()


def test_evict_host_spares_pinned_locked_and_refused_nodes():
    tree, head, left, right = host_only_tree()
    demote_all(tree)
    tree.pin_host(left)
    tree.lock(right)
    deleted = []
    assert tree.evict_host(100, on_delete=deleted.append) == 0
    tree.unlock(right)
    assert tree.evict_host(100, on_delete=deleted.append, can_evict=lambda n: n is not head) == 2
    assert deleted == [right]
    tree.unpin_host(left)
    assert tree.evict_host(100, on_delete=deleted.append) == 4
    assert deleted == [right, left, head]


def test_evict_host_skips_backed_up_nodes_still_on_device():
    tree = RadixTree(PS)
    node = tree.insert([1, 2], span(0, 2)).node
    backup(tree, node)
    assert tree.evict_host(100, on_delete=no_callback) == 0
    assert tree.host_tokens() == 2


# -- explicit tier changes -------------------------------------------------------------


def test_set_device_value_needs_an_evicted_node_below_a_resident_parent():
    tree = RadixTree(PS)
    head = tree.insert([1, 2], span(0, 2)).node
    tail = tree.insert([1, 2, 3, 4], span(0, 4)).node
    with pytest.raises(TreeUsageError, match="not an evicted node"):
        tree.set_device_value(tail, span(0, 2))
    backup(tree, head)
    backup(tree, tail, 10)
    demote_all(tree)
    with pytest.raises(TreeUsageError, match="evicted parent"):
        tree.set_device_value(tail, span(0, 2))
    with pytest.raises(TreeUsageError, match="device_slots"):
        tree.set_device_value(head, span(0, 3))
    tree.set_device_value(head, [7, 8])
    assert head.value.tolist() == [7, 8] and tree.device_tokens() == 2
    tree.check_invariants()


def test_set_and_clear_host_value():
    tree = RadixTree(PS)
    head = tree.insert([1, 2], span(0, 2)).node
    tail = tree.insert([1, 2, 3, 4], span(0, 4)).node
    with pytest.raises(TreeUsageError, match="parent without backup"):
        tree.set_host_value(tail, span(0, 2))
    backup(tree, head, 20)
    with pytest.raises(TreeUsageError, match="already backed up"):
        tree.set_host_value(head, span(0, 2))
    backup(tree, tail, 30)
    assert tree.host_tokens() == 4
    with pytest.raises(TreeUsageError, match="backed-up children"):
        tree.clear_host_value(head)
    tree.pin_host(tail)
    with pytest.raises(TreeUsageError, match="host-pinned"):
        tree.clear_host_value(tail)
    tree.unpin_host(tail)
    assert tree.clear_host_value(tail).tolist() == [30, 31]
    assert tree.clear_host_value(head).tolist() == [20, 21]
    assert tree.host_tokens() == 0
    tree.check_invariants()


# -- check_invariants detects corruption -----------------------------------------------


def corrupt_cases():
    def misaligned(tree, node):
        node.key = node.key + (9,)

    def short_value(tree, node):
        node.value = node.value[:1]

    def wrong_dtype(tree, node):
        node.value = node.value.to(torch.int32)

    def missing_hash(tree, node):
        node.hash_value = node.hash_value[:-1]

    def negative_lock(tree, node):
        node.lock_ref = -1
        tree.root.lock_ref = 0

    def child_locked_more_than_parent(tree, node):
        node.lock_ref = 1

    def evicted_without_backup(tree, node):
        node.value = None

    def backup_not_contiguous(tree, node):
        node.host_value = span(0, len(node.key))

    def device_below_evicted(tree, node):
        parent = node.parent
        parent.host_value = span(0, len(parent.key))
        parent.value = None
        tree._host_tokens += len(parent.key)
        tree._device_tokens -= len(parent.key)

    def stale_counter(tree, node):
        tree._device_tokens += 1

    def wrong_child_key(tree, node):
        parent = node.parent
        del parent.children[node.key[:PS]]
        parent.children[(7, 7)] = node

    def wrong_hash(tree, node):
        node.hash_value = ["0" * 64] * len(node.hash_value)

    return [
        (misaligned, "not a non-empty multiple"),
        (short_value, "expected int64 of length"),
        (wrong_dtype, "expected int64 of length"),
        (missing_hash, "hashes for"),
        (negative_lock, "negative lock_ref"),
        (child_locked_more_than_parent, "exceeds its parent"),
        (evicted_without_backup, "evicted without backup"),
        (backup_not_contiguous, "parent without backup"),
        (device_below_evicted, "below an evicted parent"),
        (stale_counter, "device_tokens"),
        (wrong_child_key, "not reachable"),
        (wrong_hash, "hash_value does not match"),
    ]


@pytest.mark.parametrize(
    "corrupt, message", corrupt_cases(), ids=[case.__name__ for case, _ in corrupt_cases()]
)
def test_check_invariants_reports_each_corruption(corrupt, message):
    tree = RadixTree(PS)
    tree.insert([1, 2], span(0, 2))
    node = tree.insert([1, 2, 3, 4], span(0, 4)).node
    tree.check_invariants(verify_hashes=True)
    corrupt(tree, node)
    with pytest.raises(TreeInvariantError, match=message) as info:
        tree.check_invariants(verify_hashes=True)
    assert not isinstance(info.value, AssertionError)


# -- randomized comparison against a reference model --------------------------------------


class Harness:
    """The tree plus real allocators, mirrored by a model: page prefix -> (device, host).

    The model knows nothing about nodes: every page-aligned prefix present in the tree
    maps to the device and host slots of its last page (None when absent).
    """

    def __init__(self, page_size=2, device_pages=40, host_pages=60):
        self.ps = page_size
        self.tree = RadixTree(page_size)
        self.device = PageAllocator(device_pages, page_size, name="device")
        self.host = PageAllocator(host_pages, page_size, name="host")
        self.model = {}
        self.sequences = [()]
        self.locked = []

    # model helpers
    def prefix_of(self, node):
        parts = []
        while node.parent is not None:
            parts.append(node.key)
            node = node.parent
        return tuple(t for key in reversed(parts) for t in key)

    def page_entries(self, node):
        prefix = self.prefix_of(node)
        start = len(prefix) - len(node.key)
        for offset in range(0, len(node.key), self.ps):
            yield prefix[: start + offset + self.ps], offset

    def expected_match(self, tokens):
        device, host_hit = [], 0
        for end in range(self.ps, len(tokens) - len(tokens) % self.ps + 1, self.ps):
            entry = self.model.get(tuple(tokens[:end]))
            if entry is None:
                break
            if entry[0] is not None and host_hit == 0:
                device.extend(entry[0])
            else:
                assert entry[0] is None and entry[1] is not None
                host_hit += self.ps
        return device, host_hit

    def alloc(self, allocator, num_slots, evict):
        got = allocator.alloc(num_slots)
        if got is None:
            evict(num_slots - allocator.free_slots())
            got = allocator.alloc(num_slots)
        return got

    # operations
    def new_tokens(self, rng):
        base = rng.choice(self.sequences)
        cut = rng.randrange(0, len(base) + 1, self.ps) if base else 0
        tail = [rng.randrange(3) for _ in range(self.ps * rng.randint(0, 4))]
        return list(base[:cut]) + tail

    def op_insert(self, tokens):
        tokens = tuple(tokens[: len(tokens) - len(tokens) % self.ps])
        given = self.alloc(self.device, len(tokens), self.op_evict)
        if given is None:
            return
        result = self.tree.insert(tokens, given)
        duplicates = []
        for end in range(self.ps, len(tokens) + 1, self.ps):
            page = tuple(given[end - self.ps : end].tolist())
            entry = self.model.get(tokens[:end])
            if entry is None:
                self.model[tokens[:end]] = (page, None)
            elif entry[0] is None:
                self.model[tokens[:end]] = (page, entry[1])
            else:
                duplicates.extend(page)
        assert result.duplicate_slots.tolist() == duplicates
        assert result.prefix_len == len(duplicates)
        self.device.free(result.duplicate_slots)
        self.sequences.append(tokens)

    def op_match(self, tokens):
        device, host_hit = self.expected_match(tokens)
        result = self.tree.match_prefix(tokens)
        assert result.device_slots.tolist() == device
        assert result.host_hit_tokens == host_hit
        assert result.matched_tokens == len(device) + host_hit
        assert len(self.prefix_of(result.device_node)) == len(device)
        assert len(self.prefix_of(result.host_node)) == result.matched_tokens
        return result

    def op_evict(self, num_tokens):
        def on_demote(node):
            assert node.lock_ref == 0 and node.host_value is not None
            for prefix, offset in self.page_entries(node):
                device_page, host_page = self.model[prefix]
                assert list(device_page) == node.value[offset : offset + self.ps].tolist()
                self.model[prefix] = (None, host_page)
            self.device.free(node.value)

        def on_delete(node):
            assert node.lock_ref == 0 and not node.children
            for prefix, _ in self.page_entries(node):
                assert self.model.pop(prefix)[1] is None
            self.device.free(node.value)

        evicted = self.tree.evict(num_tokens, on_demote=on_demote, on_delete=on_delete)
        if evicted < num_tokens:
            assert not [
                n
                for n in self.tree.iter_nodes()
                if not n.evicted
                and n.lock_ref == 0
                and all(c.evicted for c in n.children.values())
            ], "evict stopped early while an evictable node remained"
        return evicted

    def op_evict_host(self, num_tokens):
        def on_delete(node):
            assert node.evicted and node.host_ref == 0 and not node.children
            for prefix, _ in self.page_entries(node):
                assert self.model.pop(prefix)[0] is None
            self.host.free(node.host_value)

        evicted = self.tree.evict_host(num_tokens, on_delete=on_delete)
        if evicted < num_tokens:
            assert not [
                n
                for n in self.tree.iter_nodes()
                if n.evicted and n.lock_ref == 0 and n.host_ref == 0 and not n.children
            ], "evict_host stopped early while an evictable node remained"
        return evicted

    def op_backup(self, rng):
        candidates = [
            n
            for n in self.tree.iter_nodes()
            if not n.evicted and not n.backuped and n.parent.backuped
        ]
        if not candidates:
            return
        node = rng.choice(candidates)
        host_slots = self.alloc(self.host, len(node.key), self.op_evict_host)
        if host_slots is None or node.parent is None:
            if host_slots is not None:
                self.host.free(host_slots)
            return
        self.tree.set_host_value(node, host_slots)
        for prefix, offset in self.page_entries(node):
            page = tuple(host_slots[offset : offset + self.ps].tolist())
            self.model[prefix] = (self.model[prefix][0], page)

    def op_insert_host(self, tokens):
        anchor = self.tree.match_prefix(tokens).deepest_backed_up_node
        start = len(self.prefix_of(anchor))
        tokens = tuple(tokens[: len(tokens) - len(tokens) % self.ps])
        if start >= len(tokens):
            return
        # Pinned so that making room on the host cannot delete the prefetch's anchor.
        self.tree.pin_host(anchor)
        host_slots = self.alloc(self.host, len(tokens) - start, self.op_evict_host)
        self.tree.unpin_host(anchor)
        if host_slots is None:
            return
        hashes = page_hashes(tokens, self.ps)[start // self.ps :]
        result = self.tree.insert_host(anchor, tokens[start:], host_slots, hashes)
        duplicates = []
        for end in range(start + self.ps, len(tokens) + 1, self.ps):
            page = tuple(host_slots[end - start - self.ps : end - start].tolist())
            entry = self.model.get(tokens[:end])
            if entry is None:
                self.model[tokens[:end]] = (None, page)
            elif entry[1] is None:
                self.model[tokens[:end]] = (entry[0], page)
            else:
                duplicates.extend(page)
        assert result.duplicate_slots.tolist() == duplicates
        self.host.free(result.duplicate_slots)
        self.sequences.append(tokens)

    def op_lock(self, rng):
        nodes = list(self.tree.iter_nodes())
        if nodes:
            node = rng.choice(nodes)
            self.tree.lock(node)
            self.locked.append(node)

    def op_unlock(self, rng):
        if self.locked:
            self.tree.unlock(self.locked.pop(rng.randrange(len(self.locked))))

    def verify(self):
        self.tree.check_invariants(verify_hashes=True)
        seen = {}
        for node in self.tree.iter_nodes():
            for prefix, offset in self.page_entries(node):
                device = (
                    None
                    if node.evicted
                    else tuple(node.value[offset : offset + self.ps].tolist())
                )
                host = (
                    None
                    if not node.backuped
                    else tuple(node.host_value[offset : offset + self.ps].tolist())
                )
                seen[prefix] = (device, host)
        assert seen == self.model
        # Every slot the allocators hand out is owned by the tree: no leak, no double use.
        assert self.device.allocated_slots() == self.tree.device_tokens()
        assert self.host.allocated_slots() == self.tree.host_tokens()


def run_random_ops(seed, steps):
    rng = random.Random(seed)
    harness = Harness()
    for _ in range(steps):
        choice = rng.random()
        if choice < 0.3:
            harness.op_insert(harness.new_tokens(rng))
        elif choice < 0.5:
            tokens = harness.new_tokens(rng)
            harness.op_match(tokens + [rng.randrange(3)] * rng.randint(0, 1))
        elif choice < 0.6:
            harness.op_evict(rng.randint(1, 12))
        elif choice < 0.7:
            harness.op_evict_host(rng.randint(1, 12))
        elif choice < 0.8:
            harness.op_backup(rng)
        elif choice < 0.87:
            harness.op_insert_host(harness.new_tokens(rng))
        elif choice < 0.94:
            harness.op_lock(rng)
        else:
            harness.op_unlock(rng)
        harness.verify()
    while harness.locked:
        harness.op_unlock(rng)
    harness.op_evict(10**6)
    harness.op_evict_host(10**6)
    harness.verify()
    assert harness.tree.node_count() == 0
    assert harness.device.allocated_slots() == harness.host.allocated_slots() == 0
    return harness


@pytest.mark.parametrize("seed", range(6))
def test_random_operations_match_the_reference_model(seed):
    harness = run_random_ops(seed, 250)
    assert len(harness.sequences) > 20  # the run exercised inserts, not only misses


class TreeMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.harness = Harness(device_pages=16, host_pages=24)

    tokens = st.lists(st.integers(0, 2), max_size=9)

    @rule(tokens=tokens, reuse=st.integers(0, 1000))
    def insert(self, tokens, reuse):
        # Extend a page-aligned prefix of an earlier sequence so inserts share prefixes.
        base = self.harness.sequences[reuse % len(self.harness.sequences)]
        cut = reuse % (len(base) // self.harness.ps + 1) * self.harness.ps
        self.harness.op_insert(list(base[:cut]) + tokens)

    @rule(tokens=tokens)
    def match(self, tokens):
        self.harness.op_match(tokens)

    @rule(num_tokens=st.integers(1, 10))
    def evict(self, num_tokens):
        self.harness.op_evict(num_tokens)

    @rule(num_tokens=st.integers(1, 10))
    def evict_host(self, num_tokens):
        self.harness.op_evict_host(num_tokens)

    @rule(seed=st.integers(0, 1000))
    def backup(self, seed):
        self.harness.op_backup(random.Random(seed))

    @rule(tokens=tokens)
    def insert_host(self, tokens):
        self.harness.op_insert_host(tokens)

    @rule(seed=st.integers(0, 1000))
    def lock(self, seed):
        self.harness.op_lock(random.Random(seed))

    @rule(seed=st.integers(0, 1000))
    def unlock(self, seed):
        self.harness.op_unlock(random.Random(seed))

    @invariant()
    def consistent(self):
        self.harness.verify()


TestTreeStateMachine = TreeMachine.TestCase
TestTreeStateMachine.settings = settings(
    max_examples=40, stateful_step_count=25, deadline=None, database=None
)


@devices.needs_gpu
def test_device_slots_live_on_the_tree_device():
    device = torch.device("cuda")
    allocator = PageAllocator(8, PS, name="device")
    tree = RadixTree(PS, device=device)
    assert tree.match_prefix([1, 2]).device_slots.device.type == "cuda"
    tree.insert([1, 2, 3, 4], allocator.alloc(4).to(device))
    result = tree.insert([1, 2, 3, 4, 5, 6], allocator.alloc(6).to(device))
    assert result.node.value.device.type == "cuda"
    allocator.free(result.duplicate_slots)
    match = tree.match_prefix([1, 2, 3, 4, 5, 6])
    assert match.device_slots.device.type == "cuda" and match.device_slots.tolist() == [
        0, 1, 2, 3, 8, 9,
    ]
    tree.evict(6, on_demote=no_callback, on_delete=lambda node: allocator.free(node.value))
    assert allocator.allocated_slots() == 0
    tree.check_invariants()
