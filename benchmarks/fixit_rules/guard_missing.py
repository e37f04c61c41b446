"""Fixit 2 rule equivalent to hicache-lint's HC101, for benchmarks/bench_lint.py.

A method named `can_terminate_prefetch`, defined in a class, whose body never
reads `pool_transfers_done` (as an attribute or a getattr key) is reported.
"""

import libcst as cst
import libcst.matchers as m
from fixit import Invalid, LintRule, Valid

METHODS = frozenset({"can_terminate_prefetch"})

_DONE_ATTRIBUTE = m.Attribute(attr=m.Name("pool_transfers_done"))
_DONE_KEY = m.SimpleString(
    value=m.MatchIfTrue(lambda text: "pool_transfers_done" in text)
)


class GuardMissing(LintRule):
    MESSAGE = "can_terminate_prefetch has no pool_transfers_done guard"

    VALID = [
        Valid(
            """
            class Cache:
                def can_terminate_prefetch(self, op):
                    completed = op.completed_tokens == len(op.hash_value)
                    if completed and not op.pool_transfers_done:
                        completed = False
                    return completed
            """
        ),
    ]
    INVALID = [
        Invalid(
            """
            class Cache:
                def can_terminate_prefetch(self, op):
                    return op.completed_tokens == len(op.hash_value)
            """
        ),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.class_depth = 0

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.class_depth += 1

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self.class_depth -= 1

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if self.class_depth == 0 or node.name.value not in METHODS:
            return
        if m.findall(node.body, _DONE_ATTRIBUTE | _DONE_KEY):
            return
        self.report(node.name, self.MESSAGE)
