"""The clause each mutant is expected to break: by operator, by the role of the function it changes, by what it touches.

The most specific entry wins: (operator, role, hint), (operator, role), then (operator, hint) for
what a change touches (a combine over `terminated` breaks X1, over
`timed_out` D5), then the operator's own, then the role's
(conformance/mutants/roles.py). A kill whose first failure names none of
these clauses is listed as naming another clause: either the expectation
or the suite's message is off, and both are worth a look.

The hints an operator sets: or_to_and "terminated" / "timed_out" (what the
combine joins), reduce_swap "max_to_min" / "min_to_max", page_plus_one and
page_minus_one "budget" (a page count that feeds a timeout budget; these
hints come before the role, OVER_ROLE), remove_guard "call" (the guard's
test makes a call, deleted with it) and "count" (it orders two values).
"""

from __future__ import annotations

from conformance.mutants.roles import Role

_IO = ("io_start", "io_thread", "publish")

BY_ROLE: dict[tuple[str, str], tuple[str, ...]] = {
    ("deadline_flip", "expiry"): ("L4",),
    ("min_max_swap", "decision"): ("T1",),
    ("min_max_swap", "timeout"): ("T1",),
    # A commit past the loaded pages exposes a page still under IO (S1) or one never loaded (F3).
    ("min_max_swap", "commit"): ("F3", "S1"),
    # The hit query's MIN over every pool is what the short-hit revoke compares (F7); past it, the commit's
    # clamp (F3) still bounds what is inserted.
    ("min_max_swap", "hit_query"): ("F7", "F3"),
    ("clamp_one_pool", "hit_query"): ("F7", "F3"),
    ("min_max_swap", "io_thread"): ("S5", "L1"),
    # A guard of the commit: without it pages, a state or a window past what every rank loaded go in
    # (F3, F4, F10), possibly still under IO (S1).
    ("remove_guard", "commit"): ("F3", "F4", "F10", "S1"),
    ("reduce_swap", "decision"): ("X1",),
    # MAX agrees as well as MIN (every rank gets the same length, S4 holds); what breaks is the bound:
    # a rank commits pages it did not load, still under IO (S1) or never loaded (F3).
    ("reduce_swap", "commit"): ("F3", "S1"),
    ("reduce_swap", "hit_query"): ("S4",),
    # The drain's MIN frees ended operations once every rank's are idle: agreed by MAX, a rank whose IO still
    # runs drops those operations from its drain list, and their slots under IO never end (F8, S3's leak).
    ("reduce_swap", "ending"): ("F8", "S3"),
    ("reduce_swap", "untracked"): ("X4",),
    # The best_effort early return: without it a best_effort check runs the vote collective (X2) and,
    # where the vote starts as no, votes no (D1).
    ("remove_guard", "decision"): ("D1", "X2"),
    ("remove_assign_guard", "decision"): ("D3",),
    # The completion predicate (D2) is what D4 and D5 vote: a test of the vote names either.
    ("page_plus_one", "decision"): ("D2", "D4", "D5"),
    ("page_minus_one", "decision"): ("D2", "D4", "D5"),
    # A page more: the commit inserts a page still under IO (S1) or never loaded (F3). A page short: it
    # drops a loaded page (F11), or reports a hit a match then does not load (F8). Either, on the page
    # keys alone, hands the tree pages keyed by their neighbours' keys (S5).
    ("page_plus_one", "commit"): ("F3", "S1", "S5"),
    ("page_minus_one", "commit"): ("F11", "F8", "S5"),
    # Slots sliced one page off: bytes in the wrong slots (S5), progress the IO did not make (L1),
    # a slot ended twice or never (S3), or one whose IO never ends committed under it (S1).
    ("page_plus_one", "io_thread"): ("S5", "L1", "S3", "S1"),
    ("page_minus_one", "io_thread"): ("S5", "L1", "S3", "S1"),
    ("page_minus_one", "hit_query"): ("F11",),
    ("clamp_one_pool", "commit"): ("F3", "S1"),
    ("drop_lock", "io_end"): ("F5",),
    ("drop_lock", "revoke"): ("F7",),
    ("drop_lock", "expiry"): ("L4",),
    ("drop_lock", "release"): ("S3",),
    # take_for_insert's lock makes "no IO runs into these slots" and the handover to the tree one step.
    ("drop_lock", "attach"): ("S1",),
    ("drop_recheck", "hit_trim"): ("F2",),
    ("drop_recheck", "io_end"): ("F5",),
    ("drop_recheck", "revoke"): ("F7",),
    ("drop_recheck", "expiry"): ("L4",),
    # Without the early return, a check with nothing expired still declares every extra pool done:
    # the vote then ends while a pool transfer runs (D3).
    ("remove_guard", "expiry"): ("L4", "D3"),
    # A guard of the hit query miscounts either way: past a pool's pages (F3, or a short hit not
    # revoked, F7) or short of what is stored (F11).
    ("remove_guard", "hit_query"): ("F3", "F7", "F11"),
    # A guard of what the commit attaches: without it a state or window lands where it does not belong
    # (F4, F10, S1), or replaces one the node already carries, whose slot then never ends (F8, S3).
    ("remove_guard", "attach"): ("F4", "F10", "S1", "F8", "S3"),
    ("free_before_io_end", "copy_free"): ("F9",),
    # A guard of the integrity check fails either way: a damaged page passes as whole (S7), or, where the guard picks
    # the algorithm or accepts a whole page, every read of a whole page is refused, and the commit drops pages that
    # loaded (F11).
    ("remove_guard", "integrity"): ("S7", "F11"),
    # A guard of load-back: without it a state with no device slot is copied nowhere, where the usable match
    # must end at a state the device holds (F4), or a failed copy's garbage is served (S5) or freed under IO (F9, S1).
    ("remove_guard", "load_back"): ("F4", "S5", "F9", "S1"),
    **{("drop_lock", role): ("F1",) for role in _IO},
}

BY_ROLE_HINT: dict[tuple[str, str, str], tuple[str, ...]] = {
    # The IO loop's guards other than the termination re-checks (those are drop_recheck's):
    # a short batch ends the loop: without it, pages after a missing one count as loaded, and the commit
    # would insert a slot no load filled (F3);
    ("remove_guard", "io_thread", "count"): ("F3",),
    # the test is the call that ends the batch's IO: deleted with it, the IO never ends (L4), nor a wait for it (L1).
    ("remove_guard", "io_thread", "call"): ("L4", "L1"),
}

BY_HINT: dict[tuple[str, str], tuple[str, ...]] = {
    # In the reducer itself: MAX is the vote's combine, MIN every agreement: the hit length and the commit (S4),
    # and the backup room and write acks, agreed so that every rank backs up alike and so runs the same
    # collectives (L3: agreed by MAX, a rank without room or without the ack goes on as if it had them).
    ("reduce_swap", "max_to_min"): ("X1",),
    ("reduce_swap", "min_to_max"): ("S4", "L3"),
    ("or_to_and", "terminated"): ("X1",),
    ("or_to_and", "timed_out"): ("D5",),
}

BY_OPERATOR: dict[str, tuple[str, ...]] = {
    "deadline_flip": ("T2",),
    "reduce_swap": ("X1",),
    "or_to_and": ("X1",),
    "clamp_one_pool": ("F3",),
    "drop_lock": ("F2",),
    "remove_assign_guard": ("D3",),
    "drop_recheck": ("F1", "S2"),
    "free_before_io_end": ("F5",),
    "drop_namespace_field": ("S6",),
}


# Hints that say more than any role: a page count inside a timeout budget changes the budget (T1),
# whichever function computes it (a decision that inlines its budget as well as a budget helper).
OVER_ROLE: dict[tuple[str, str], tuple[str, ...]] = {
    ("page_plus_one", "budget"): ("T1",),
    ("page_minus_one", "budget"): ("T1",),
}


def expected_clauses(operator: str, role: Role, hint: str = "") -> tuple[str, ...]:
    for found in (OVER_ROLE.get((operator, hint)), BY_ROLE_HINT.get((operator, role.name, hint)), BY_ROLE.get((operator, role.name)),
                  BY_HINT.get((operator, hint)), BY_OPERATOR.get(operator)):
        if found:
            return found
    return role.clauses
