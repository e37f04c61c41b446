"""Each catalogue operator on a small hand-written function: exactly the expected change, nothing else, stable ids."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from conformance.mutants.catalogue import Mutant, mutants_of
from conformance.mutants.operators import OPERATORS
from conformance.mutants.roles import ROLE_NAMED, Target

OPERATOR = {op.name: op for op in OPERATORS}


def mutate(tmp_path: Path, source: str, operator: str, *, function: str = "f", role: str = "decision") -> list[Mutant]:
    path = tmp_path / "snippet.py"
    path.write_text(textwrap.dedent(source).lstrip("\n"), encoding="utf-8")
    return mutants_of([Target("snippet", str(path), function, ROLE_NAMED[role])], [OPERATOR[operator]])


def only(mutants: list[Mutant]) -> Mutant:
    assert len(mutants) == 1, [m.id for m in mutants]
    return mutants[0]


def dedent(source: str) -> str:
    return textwrap.dedent(source).lstrip("\n")


def test_deadline_flip_changes_the_time_comparison_only(tmp_path):
    m = only(mutate(tmp_path, """
        def f(self, op, count, limit):
            elapsed = self.clock.now() - op.start_time
            if elapsed > self.budget_s:
                return True
            return count > limit
        """, "deadline_flip"))
    assert m.source == dedent("""
        def f(self, op, count, limit):
            elapsed = self.clock.now() - op.start_time
            if elapsed >= self.budget_s:
                return True
            return count > limit
        """)
    assert (m.id, m.expected) == ("snippet.py:3:deadline_flip", ("T2",))


def test_deadline_flip_makes_a_non_strict_bound_strict(tmp_path):
    m = only(mutate(tmp_path, """
        def f(now, started, bound_s):
            return now - started <= bound_s
        """, "deadline_flip", role="expiry"))
    assert "return now - started < bound_s" in m.source
    assert m.expected == ("L4",)


def test_min_max_swap(tmp_path):
    m = only(mutate(tmp_path, """
        def f(a, b):
            return min(a, b) + sum([a])
        """, "min_max_swap", role="timeout"))
    assert m.source == "def f(a, b):\n    return max(a, b) + sum([a])\n"
    assert m.expected == ("T1",)


def test_reduce_swap_swaps_reducer_calls_and_reduce_ops_not_other_constants(tmp_path):
    mutants = mutate(tmp_path, """
        def f(self, dist, vote):
            out = self.reducer.all_reduce_max([vote], name="vote_max")
            dist.all_reduce(out, op=dist.ReduceOp.MIN)
            return Limits.MAX
        """, "reduce_swap")
    assert [m.id for m in mutants] == ["snippet.py:2:reduce_swap", "snippet.py:3:reduce_swap"]
    assert "self.reducer.all_reduce_min([vote]" in mutants[0].source and "ReduceOp.MIN" in mutants[0].source
    assert "ReduceOp.MAX" in mutants[1].source and "all_reduce_max" in mutants[1].source
    assert all("Limits.MAX" in m.source for m in mutants)


def test_or_to_and_in_the_combine_and_only_there(tmp_path):
    m = only(mutate(tmp_path, """
        def f(ranks_no, terminated):
            return ranks_no == 0 or terminated
        """, "or_to_and"))
    assert "return ranks_no == 0 and terminated" in m.source
    assert m.expected == ("X1",)  # the combine over `terminated`
    assert mutate(tmp_path, "def f(a, b):\n    return a or b\n", "or_to_and", role="release") == []


def test_or_to_and_over_timed_out_is_the_timeout_vote(tmp_path):
    m = only(mutate(tmp_path, "def f(completed, timed_out):\n    return completed or timed_out\n", "or_to_and"))
    assert m.expected == ("D5",)


@pytest.mark.parametrize("operator, sign", [("page_plus_one", "+"), ("page_minus_one", "-")])
def test_off_by_one_page(tmp_path, operator, sign):
    mutants = mutate(tmp_path, """
        def f(self, hashes, tokens, ps, width):
            done = tokens == len(hashes) * self.page_size
            pages = tokens // ps
            return done, pages, tokens * width
        """, operator)
    assert [m.source.splitlines()[1:3] for m in mutants] == [
        [f"    done = tokens == (len(hashes) {sign} 1) * self.page_size", "    pages = tokens // ps"],
        ["    done = tokens == len(hashes) * self.page_size", f"    pages = (tokens // ps {sign} 1)"],
    ]
    assert mutants[0].expected == ("D2", "D4", "D5")


def test_several_changes_on_one_line_get_numbered_ids_in_column_order(tmp_path):
    mutants = mutate(tmp_path, """
        def f(slots, first, last, ps):
            return slots[first * ps : last * ps]
        """, "page_plus_one", role="io_thread")
    assert [m.id for m in mutants] == ["snippet.py:2:page_plus_one", "snippet.py:2:page_plus_one#2"]
    assert "slots[(first + 1) * ps : last * ps]" in mutants[0].source
    assert "slots[first * ps : (last + 1) * ps]" in mutants[1].source


def test_clamp_one_pool_keeps_the_first_count_of_a_clamp_helper(tmp_path):
    m = only(mutate(tmp_path, """
        def f(progress, kv_pages):
            local = committable_pages(kv_pages, progress.pool_progress)  # F3
            return local
        """, "clamp_one_pool", role="commit"))
    assert "    local = kv_pages  # F3\n" in m.source
    assert m.expected == ("F3", "S1")  # a commit past a pool's loaded pages: one under IO (S1) or never loaded (F3)


def test_clamp_one_pool_drops_a_fold_over_the_pools(tmp_path):
    m = only(mutate(tmp_path, """
        def f(op, hit):
            for plan in op.pool_transfers:
                if hit:
                    hit = min(hit, plan.count)
            return min(hit, 4)
        """, "clamp_one_pool", role="hit_query"))
    assert m.source == dedent("""
        def f(op, hit):
            for plan in op.pool_transfers:
                if hit:
                    pass
            return min(hit, 4)
        """)


def test_drop_lock_inlines_the_body_and_keeps_the_comment(tmp_path):
    m = only(mutate(tmp_path, """
        def f(self):
            # F2: one snapshot
            with self.lock:
                self.terminated = True
                return self.snapshot()
        """, "drop_lock", role="terminate"))
    assert m.source == dedent("""
        def f(self):
            # F2: one snapshot
            self.terminated = True
            return self.snapshot()
        """)
    assert (m.expected, m.equivalent) == (("F2",), None)


def test_drop_lock_around_one_attribute_read_is_argued_equivalent(tmp_path):
    read = only(mutate(tmp_path, "def f(self):\n    with self.lock:\n        return self._terminated\n", "drop_lock"))
    loop = only(mutate(tmp_path, "def f(self):\n    with self.lock:\n        return any(self._in_flight.values())\n", "drop_lock"))
    assert read.equivalent and "atomic under the GIL" in read.equivalent
    assert loop.equivalent is None
    assert mutate(tmp_path, "def f(self):\n    with open(self.path) as out:\n        return out.read()\n", "drop_lock") == []


def test_remove_guard_deletes_an_exiting_if_and_nothing_else(tmp_path):
    source = dedent("""
        def f(self, op):
            # no operation: nothing to do
            if op is None:
                return
            if op.ready:
                op.go()
            else:
                op.wait()
            if self._terminated:
                return
            op.go()
        """)
    m = only(mutate(tmp_path, source, "remove_guard", role="ending"))  # not the if/else, not the termination re-check
    lines = source.splitlines(keepends=True)
    assert m.source == "".join(lines[:2] + lines[4:])  # the guard's two lines go; its comment stays


def test_remove_guard_raising_a_usage_error_is_argued_equivalent(tmp_path):
    m = only(mutate(tmp_path, """
        def f(node):
            if node.lock_ref <= 0:
                raise TreeUsageError("unlock below zero")
            node.lock_ref -= 1
        """, "remove_guard", role="eviction"))
    assert m.equivalent and "TreeUsageError" in m.equivalent
    other = only(mutate(tmp_path, "def f(x):\n    if x:\n        raise ValueError(x)\n    return x\n", "remove_guard"))
    assert other.equivalent is None


def test_remove_assign_guard_deletes_the_flag_forcing_guard(tmp_path):
    m = only(mutate(tmp_path, """
        def f(p, completed):
            if completed and p.pool_transfers_present and not p.pool_transfers_done:
                completed = False
            return completed
        """, "remove_assign_guard"))
    assert m.source == "def f(p, completed):\n    return completed\n"
    assert m.expected == ("D3",)


def test_drop_recheck_forms(tmp_path):
    mutants = mutate(tmp_path, """
        def f(self, op):
            if self._terminated or self._expired:
                return None
            if not op.is_terminated():
                op.load()
            if self._terminated:
                self.release()
                return False
            return True
        """, "drop_recheck", role="io_start")
    assert [m.id for m in mutants] == ["snippet.py:2:drop_recheck", "snippet.py:4:drop_recheck", "snippet.py:6:drop_recheck"]
    first, second, third = (m.source.splitlines() for m in mutants)
    assert first[1] == "    if self._expired:"  # the termination half goes, the other stays
    assert second[3:5] == ["    op.load()", "    if self._terminated:"]
    assert third[5:] == ["    return True"]
    assert all(m.expected == ("F1", "S2") for m in mutants)


def test_free_before_io_end_moves_the_free_above_the_io_end(tmp_path):
    m = only(mutate(tmp_path, """
        def close(self):
            for stop in (self.controller.close, self.engine.close):
                stop()
            # no IO runs any more
            self.drain_after_close()
            self.poll()
        """, "free_before_io_end", function="close", role="ending"))
    assert m.source == dedent("""
        def close(self):
            # no IO runs any more
            self.drain_after_close()
            for stop in (self.controller.close, self.engine.close):
                stop()
            self.poll()
        """)


def test_free_before_io_end_skips_a_free_that_reads_what_the_io_end_returns(tmp_path):
    assert mutate(tmp_path, """
        def f(op):
            done = op.end_io()
            op.release(done)
        """, "free_before_io_end", role="io_end") == []


def test_drop_namespace_field_drops_each_field_once(tmp_path):
    mutants = mutate(tmp_path, """
        def describe(self):
            return {
                "dtype": self.dtype,
                "page_size": self.page_size,
            }
        """, "drop_namespace_field", function="describe", role="namespace")
    assert [m.source for m in mutants] == [
        'def describe(self):\n    return {\n        "page_size": self.page_size,\n    }\n',
        'def describe(self):\n    return {\n        "dtype": self.dtype,\n    }\n',
    ]
    assert mutants[0].expected == ("S6",)


def test_ids_and_sources_are_the_same_on_every_run(tmp_path):
    source = "def f(self, a, b):\n    with self.lock:\n        return min(a, b) * self.page_size\n"
    runs = []
    for _ in range(2):
        path = tmp_path / "snippet.py"
        path.write_text(source, encoding="utf-8")
        runs.append([(m.id, m.source, m.diff) for m in mutants_of([Target("snippet", str(path), "f", ROLE_NAMED["commit"])])])
    assert runs[0] == runs[1]
    assert [i for i, _, _ in runs[0]] == ["snippet.py:2:drop_lock", "snippet.py:3:min_max_swap", "snippet.py:3:page_minus_one",
                                          "snippet.py:3:page_plus_one"]


def test_a_diff_shows_the_change(tmp_path):
    m = only(mutate(tmp_path, "def f(a, b):\n    return min(a, b)\n", "min_max_swap"))
    assert m.diff.splitlines()[:2] == ["--- a/snippet.py", "+++ b/snippet.py"]
    assert [line for line in m.diff.splitlines() if line[:1] in "+-" and line[:3] not in ("---", "+++")] == [
        "-    return min(a, b)", "+    return max(a, b)"]


def test_a_page_count_that_feeds_a_timeout_budget_expects_the_budget_clause(tmp_path):
    """Inline in the decision, the budget's page count is T1's, the completion predicate's D2/D4/D5."""
    mutants = mutate(tmp_path, """
        def f(self, hit_pages, completed, elapsed, limits):
            complete = completed == hit_pages * self.page_size
            hit_tokens = hit_pages * self.page_size
            budget_s = min(limits.timeout_max_s, limits.timeout_base_s + hit_tokens / 1024)
            return complete or elapsed > budget_s
        """, "page_plus_one")
    assert [(m.line, m.expected) for m in mutants] == [(2, ("D2", "D4", "D5")), (3, ("T1",))]


def test_remove_guard_says_whether_its_test_makes_a_call_or_orders_two_counts(tmp_path):
    """The IO loop's guards: a short batch ends the loop (F3), the call ending the IO goes with its guard (L4, L1), a refused start (F1, S2)."""
    mutants = mutate(tmp_path, """
        def f(self, op, slots):
            start = op.begin_io(slots)
            if start is None:
                return
            if not op.end_io(start):
                return
            if arrived < wanted:
                return
        """, "remove_guard", role="io_thread")
    assert [(m.line, m.expected) for m in mutants] == [(3, ("F1", "S2")), (5, ("L4", "L1")), (7, ("F3",))]


def test_remove_guard_in_an_integrity_check_breaks_s7_or_drops_whole_pages_f11(tmp_path):
    """Deleting the branch that picks the checksum algorithm makes every check refuse: no damage is served (S7
    holds) and every whole page that loaded is dropped (F11); deleting a comparison lets damage through (S7)."""
    source = dedent("""
        def checksum(algorithm, page):
            if algorithm == "sum64":
                return sum(page)
            raise ValueError(algorithm)
        """)
    m = only(mutate(tmp_path, source, "remove_guard", function="checksum", role="integrity"))
    assert m.expected == ("S7", "F11")
