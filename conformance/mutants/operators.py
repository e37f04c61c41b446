"""Single-point mutation operators: each finds the places in one function where it applies, one change per place.

A `Site` is one change: the node replaced (an expression, or the block
holding a statement that is removed, inlined or moved), its replacement,
and the node whose line names the mutant. Operators never change two places
at once, and keep comments where they were, so a mutant's diff is the
change and nothing else.

Operators recognise the protocol by shape and by name: a comparison "at a
deadline" has a time-like operand (`now`, `elapsed`, `*_s`, `*budget*`,
`*timeout*`, ...), a lock is a `with` over an expression naming a lock, a
termination re-check reads `_terminated`, `terminated` or `is_terminated()`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Sequence

import libcst as cst

Code = Callable[[cst.CSTNode], str]


@dataclass(frozen=True)
class Site:
    operator: str
    anchor: cst.CSTNode  # its line names the mutant
    target: cst.CSTNode  # the node replaced
    replacement: cst.CSTNode
    description: str
    hint: str = ""  # what the change touches when it says more than the role (expectations.py reads it)
    equivalent: str | None = None  # the catalogue's argument that this change cannot be observed


@dataclass(frozen=True)
class Operator:
    name: str
    summary: str
    find: Callable[[cst.FunctionDef, Code], Iterable[Site]]
    roles: frozenset[str] | None = None  # the roles it applies to; None: every protocol function


# --- what the operators look at -----------------------------------------------------------------

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TIME_WORDS = {"now", "elapsed", "deadline", "monotonic", "perf_counter", "time", "started", "start_time"}
_TERMINATION = re.compile(r"(?<![A-Za-z0-9_])(?:_terminated|terminated|is_terminated)(?![A-Za-z0-9_])")
_PAGE_SIZE_NAMES = {"page_size", "ps"}
_FREE_CALL = re.compile(r"(free|release|drain|deferred)", re.IGNORECASE)
_IO_END_CALLS = {"end_io", "fail_in_flight", "finish_transfers", "wait", "join", "_finish", "poll", "stop", "close"}
_EXITS = (cst.Return, cst.Break, cst.Continue, cst.Raise)


def _identifiers(text: str) -> list[str]:
    return _IDENT.findall(text)


def _is_time_like(text: str) -> bool:
    for word in _identifiers(text):
        low = word.lower()
        if low in _TIME_WORDS or low.endswith("_s") or any(k in low for k in ("budget", "deadline", "timeout", "elapsed")):
            return True
    return False


def _reads_termination(text: str) -> bool:
    return bool(_TERMINATION.search(text))


def _mentions_pool(text: str) -> bool:
    return any("pool" in word.lower() for word in _identifiers(text))


def _callee_name(call: cst.Call) -> str:
    func = call.func
    if isinstance(func, cst.Attribute):
        return func.attr.value
    if isinstance(func, cst.Name):
        return func.value
    return ""


def _nodes(root: cst.CSTNode, kind: type | tuple[type, ...]) -> list[cst.CSTNode]:
    """Every node of `kind` under `root`, in source order."""
    found: list[cst.CSTNode] = []

    class _Collect(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            if isinstance(node, kind):
                found.append(node)
            return True

    root.visit(_Collect())
    return found


def _calls(root: cst.CSTNode) -> list[cst.Call]:
    return [n for n in _nodes(root, cst.Call) if isinstance(n, cst.Call)]


def _blocks(function: cst.FunctionDef) -> list[cst.IndentedBlock]:
    return [b for b in _nodes(function.body, cst.IndentedBlock) if isinstance(b, cst.IndentedBlock)] + (
        [function.body] if isinstance(function.body, cst.IndentedBlock) else [])


def _small_statements(statement: cst.BaseStatement) -> Sequence[cst.BaseSmallStatement]:
    if isinstance(statement, cst.SimpleStatementLine):
        return statement.body
    return ()


def _suite_statements(suite: cst.BaseSuite) -> list[cst.BaseStatement]:
    """A suite's statements as block lines (a one-line suite `if x: return` gives its small statements as lines)."""
    if isinstance(suite, cst.IndentedBlock):
        return list(suite.body)
    return [cst.SimpleStatementLine(body=[s.with_changes(semicolon=cst.MaybeSentinel.DEFAULT) for s in suite.body])]


def _ends_in_exit(suite: cst.BaseSuite) -> bool:
    statements = _suite_statements(suite)
    last = _small_statements(statements[-1]) if statements else ()
    return bool(last) and isinstance(last[-1], _EXITS)


def _keep_comments(removed: cst.BaseStatement, following: cst.BaseStatement) -> cst.BaseStatement:
    """The comment lines above a removed statement stay, above the statement now in its place."""
    lines = getattr(removed, "leading_lines", ())
    if not lines:
        return following
    return following.with_changes(leading_lines=[*lines, *following.leading_lines])


def _without(block: cst.IndentedBlock, index: int) -> cst.IndentedBlock:
    body = list(block.body)
    removed = body.pop(index)
    if index < len(body):
        body[index] = _keep_comments(removed, body[index])
    elif not body:
        body = [_keep_comments(removed, cst.SimpleStatementLine(body=[cst.Pass()]))]
    return block.with_changes(body=body)


def _replacing(block: cst.IndentedBlock, index: int, statements: Sequence[cst.BaseStatement]) -> cst.IndentedBlock:
    body = list(block.body)
    removed = body[index]
    statements = list(statements)
    if statements:
        statements[0] = _keep_comments(removed, statements[0])
    body[index : index + 1] = statements
    return block.with_changes(body=body)


def _one_line(text: str, limit: int = 90) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- expression operators ----------------------------------------------------------------------

_FLIPPED = {
    cst.GreaterThan: (cst.GreaterThanEqual, ">", ">="),
    cst.GreaterThanEqual: (cst.GreaterThan, ">=", ">"),
    cst.LessThan: (cst.LessThanEqual, "<", "<="),
    cst.LessThanEqual: (cst.LessThan, "<=", "<"),
}


def _deadline_flip(function: cst.FunctionDef, code: Code) -> Iterator[Site]:
    for comparison in _nodes(function.body, cst.Comparison):
        assert isinstance(comparison, cst.Comparison)
        if len(comparison.comparisons) != 1 or not _is_time_like(code(comparison)):
            continue
        target = comparison.comparisons[0]
        flipped = _FLIPPED.get(type(target.operator))
        if flipped is None:
            continue
        kind, before, after = flipped
        op = target.operator
        new_op = kind(whitespace_before=op.whitespace_before, whitespace_after=op.whitespace_after)  # type: ignore[call-arg]
        replacement = comparison.with_changes(comparisons=[target.with_changes(operator=new_op)])
        yield Site("deadline_flip", comparison, comparison, replacement,
                   f"`{before}` becomes `{after}` at a deadline: `{_one_line(code(comparison))}`")


def _min_max_swap(function: cst.FunctionDef, code: Code) -> Iterator[Site]:
    for call in _calls(function.body):
        if isinstance(call.func, cst.Name) and call.func.value in ("min", "max"):
            other = "max" if call.func.value == "min" else "min"
            replacement = call.with_changes(func=call.func.with_changes(value=other))
            yield Site("min_max_swap", call, call, replacement,
                       f"`{call.func.value}(` becomes `{other}(` in `{_one_line(code(call))}`")


_REDUCE_SWAP = {"all_reduce_max": "all_reduce_min", "all_reduce_min": "all_reduce_max", "MAX": "MIN", "MIN": "MAX"}


def _reduce_swap(function: cst.FunctionDef, code: Code) -> Iterator[Site]:
    for attribute in _nodes(function.body, cst.Attribute):
        assert isinstance(attribute, cst.Attribute)
        name = attribute.attr.value
        if name not in _REDUCE_SWAP or (name in ("MAX", "MIN") and not code(attribute.value).endswith("ReduceOp")):
            continue
        replacement = attribute.with_changes(attr=attribute.attr.with_changes(value=_REDUCE_SWAP[name]))
        yield Site("reduce_swap", attribute, attribute, replacement,
                   f"the cross-rank reduce `{code(attribute)}` becomes `{code(replacement)}`",
                   hint="max_to_min" if name.lower().endswith("max") else "min_to_max")


def _or_to_and(function: cst.FunctionDef, code: Code) -> Iterator[Site]:
    for operation in _nodes(function.body, cst.BooleanOperation):
        assert isinstance(operation, cst.BooleanOperation)
        if not isinstance(operation.operator, cst.Or):
            continue
        op = operation.operator
        replacement = operation.with_changes(operator=cst.And(whitespace_before=op.whitespace_before, whitespace_after=op.whitespace_after))
        text = code(operation)
        hint = "terminated" if _reads_termination(text) else "timed_out" if "timed_out" in text else ""
        yield Site("or_to_and", operation, operation, replacement,
                   f"the combine `{_one_line(text)}` needs both sides (`or` becomes `and`)", hint=hint)


def _is_page_size(node: cst.BaseExpression, code: Code) -> bool:
    if isinstance(node, cst.Name):
        return node.value in _PAGE_SIZE_NAMES
    if isinstance(node, cst.Attribute):
        return node.attr.value == "page_size"
    return False


def _page_shift(sign: str) -> Callable[[cst.FunctionDef, Code], Iterator[Site]]:
    name = "page_plus_one" if sign == "+" else "page_minus_one"
    word = "more" if sign == "+" else "less"

    def find(function: cst.FunctionDef, code: Code) -> Iterator[Site]:
        in_budget = _budget_operations(function)
        for operation in _nodes(function.body, cst.BinaryOperation):
            assert isinstance(operation, cst.BinaryOperation)
            if isinstance(operation.operator, cst.Multiply) and _is_page_size(operation.right, code):
                shifted = cst.parse_expression(f"({code(operation.left)} {sign} 1)")
                replacement = operation.with_changes(left=shifted)
            elif isinstance(operation.operator, cst.Multiply) and _is_page_size(operation.left, code):
                shifted = cst.parse_expression(f"({code(operation.right)} {sign} 1)")
                replacement = operation.with_changes(right=shifted)
            elif isinstance(operation.operator, cst.FloorDivide) and _is_page_size(operation.right, code):
                replacement = cst.parse_expression(f"({code(operation)} {sign} 1)")
            else:
                continue
            yield Site(name, operation, operation, replacement,
                       f"one page {word}: `{_one_line(code(operation))}` becomes `{_one_line(code(replacement))}`",
                       hint="budget" if id(operation) in in_budget else "")

    return find


_BUDGET_NAME = re.compile(r"budget|timeout|deadline", re.IGNORECASE)


def _budget_operations(function: cst.FunctionDef) -> set[int]:
    """Expressions that compute a timeout budget: in an assignment to a budget-like name, or to a name such an assignment reads."""
    assigns = [a for a in _nodes(function.body, cst.Assign) if isinstance(a, cst.Assign)]

    def targets(assign: cst.Assign) -> set[str]:
        return {t.target.value for t in assign.targets if isinstance(t.target, cst.Name)}

    feeding = {n.value for a in assigns if any(_BUDGET_NAME.search(t) for t in targets(a)) for n in _nodes(a.value, cst.Name)}
    found: set[int] = set()
    for assign in assigns:
        names = targets(assign)
        if names & feeding or any(_BUDGET_NAME.search(t) for t in names):
            found.update(id(n) for n in _nodes(assign.value, cst.BinaryOperation))
    return found


def _clamp_one_pool(function: cst.FunctionDef, code: Code) -> Iterator[Site]:
    folds = list(_pool_folds(function, code))
    inside_folds = {id(n) for _, statement, _, _ in folds for n in _nodes(statement, cst.Call)}
    # A clamp helper over every pool, or min() over counts of several pools: only the first count stays.
    for call in _calls(function.body):
        if id(call) in inside_folds:
            continue
        callee = _callee_name(call)
        args = [a for a in call.args if a.keyword is None and not a.star]
        helper = ("clamp" in callee or "committable" in callee) and len(args) >= 2
        over_pools = callee == "min" and isinstance(call.func, cst.Name) and len(args) >= 2 and any(_mentions_pool(code(a.value)) for a in args[1:])
        if helper or over_pools:
            yield Site("clamp_one_pool", call, call, args[0].value,
                       f"the clamp over every pool keeps the first count only: `{_one_line(code(call))}` becomes `{_one_line(code(args[0].value))}`")
    # A running clamp folded over a loop on the pools: the fold goes, the count stays the first pool's.
    for loop, statement, block, index in folds:
        yield Site("clamp_one_pool", statement, block, _without(block, index),
                   f"the clamp over the pools of `for ... in {_one_line(code(loop.iter))}` is dropped: `{_one_line(code(statement).strip())}` goes")


def _pool_folds(function: cst.FunctionDef, code: Code) -> Iterator[tuple[cst.For, cst.BaseStatement, cst.IndentedBlock, int]]:
    """`x = min(x, ...)` statements inside a loop over pools: (loop, statement, its block, its index)."""
    for loop in _nodes(function.body, cst.For):
        assert isinstance(loop, cst.For)
        if not _mentions_pool(code(loop.iter)):
            continue
        for block in _nodes(loop.body, cst.IndentedBlock) + ([loop.body] if isinstance(loop.body, cst.IndentedBlock) else []):
            assert isinstance(block, cst.IndentedBlock)
            for index, statement in enumerate(block.body):
                small = _small_statements(statement)
                if len(small) != 1 or not isinstance(small[0], cst.Assign) or len(small[0].targets) != 1:
                    continue
                value = small[0].value
                if (isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value == "min" and value.args
                        and code(value.args[0].value) == code(small[0].targets[0].target)):
                    yield loop, statement, block, index


# --- statement operators ----------------------------------------------------------------------


def _drop_lock(function: cst.FunctionDef, code: Code) -> Iterator[Site]:
    for block in _blocks(function):
        for index, statement in enumerate(block.body):
            if not isinstance(statement, cst.With) or len(statement.items) != 1:
                continue
            held = code(statement.items[0].item)
            if "lock" not in held.lower():
                continue
            inner = _suite_statements(statement.body)
            yield Site("drop_lock", statement, block, _replacing(block, index, inner),
                       f"`with {held}:` is dropped: its body runs without the lock", equivalent=_atomic_read(inner, code))


def _atomic_read(statements: Sequence[cst.BaseStatement], code: Code) -> str | None:
    """Known equivalent: a lock around one read of one attribute or name, with nothing else in it."""
    small = _small_statements(statements[0]) if len(statements) == 1 else ()
    if len(small) == 1 and isinstance(small[0], cst.Return) and isinstance(small[0].value, (cst.Name, cst.Attribute)):
        return (f"the lock guards one read (`{code(small[0])}`): a single attribute load is atomic under the GIL, and "
                "every value it can return unlocked is one a locked read returns at the point the writer's section ends")
    return None


def _remove_guard(function: cst.FunctionDef, code: Code) -> Iterator[Site]:
    for block in _blocks(function):
        for index, statement in enumerate(block.body):
            if not _is_guard(statement) or _reads_termination(code(statement.test)):  # type: ignore[attr-defined]
                continue  # a termination re-check is drop_recheck's
            body = _suite_statements(statement.body)  # type: ignore[attr-defined]
            shown = code(body[-1]).strip() if len(body) == 1 else "... " + code(body[-1]).strip()
            yield Site("remove_guard", statement, block, _without(block, index),
                       f"the guard `if {_one_line(code(statement.test), 60)}: {_one_line(shown, 40)}` is deleted",  # type: ignore[attr-defined]
                       equivalent=_defensive(body[-1], code), hint=_guard_hint(statement.test))  # type: ignore[attr-defined]


_ORDERINGS = (cst.LessThan, cst.GreaterThan, cst.LessThanEqual, cst.GreaterThanEqual)


def _guard_hint(test: cst.BaseExpression) -> str:
    """What a guard's test does: "call" when it makes a call (deleting the guard deletes the call), "count" when it orders two values."""
    if _calls(test):
        return "call"
    if isinstance(test, cst.Comparison) and any(isinstance(c.operator, _ORDERINGS) for c in test.comparisons):
        return "count"
    return ""


def _is_guard(statement: cst.BaseStatement) -> bool:
    """An `if` without else whose short body leaves (return, break, continue, raise)."""
    return (isinstance(statement, cst.If) and statement.orelse is None and _ends_in_exit(statement.body)
            and len(_suite_statements(statement.body)) <= _GUARD_STATEMENTS)


_GUARD_STATEMENTS = 3  # a longer body is a branch of the logic, not a guard
_DEFENSIVE_ERRORS = re.compile(r"(Usage|Invariant|Fence|Lock|Assertion)Error$")


def _defensive(last: cst.BaseStatement, code: Code) -> str | None:
    """Known equivalent: a guard raising the implementation's own "you broke me" error, reachable only through another bug."""
    small = _small_statements(last)
    raised = small[-1].exc if small and isinstance(small[-1], cst.Raise) else None
    name = _callee_name(raised) if isinstance(raised, cst.Call) else ""
    if not _DEFENSIVE_ERRORS.search(name):
        return None
    return (f"a defensive check: it raises {name} only when a caller or another part of the implementation is already broken; "
            "with this one change alone, correct code never reaches it")


def _remove_assign_guard(function: cst.FunctionDef, code: Code) -> Iterator[Site]:
    for block in _blocks(function):
        for index, statement in enumerate(block.body):
            if not isinstance(statement, cst.If) or statement.orelse is not None:
                continue
            inner = _suite_statements(statement.body)
            small = _small_statements(inner[0]) if len(inner) == 1 else ()
            if len(small) != 1 or not isinstance(small[0], cst.Assign):
                continue
            if not isinstance(small[0].value, (cst.Name, cst.Integer)) or code(small[0].value) not in ("False", "True", "None", "0", "1"):
                continue
            yield Site("remove_assign_guard", statement, block, _without(block, index),
                       f"the guard `if {_one_line(code(statement.test), 60)}: {code(small[0])}` is deleted")


def _drop_recheck(function: cst.FunctionDef, code: Code) -> Iterator[Site]:
    for block in _blocks(function):
        for index, statement in enumerate(block.body):
            if not isinstance(statement, cst.If) or statement.orelse is not None or not _reads_termination(code(statement.test)):
                continue
            test = statement.test
            shown = _one_line(code(test), 70)
            if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.Or):
                kept = [side for side in (test.left, test.right) if not _reads_termination(code(side))]
                if len(kept) == 1:  # `if terminated or other:` keeps `other`
                    replacement = statement.with_changes(test=kept[0])
                    yield Site("drop_recheck", statement, statement, replacement,
                               f"the termination re-check leaves `if {shown}:` (it keeps `{_one_line(code(kept[0]), 50)}`)")
                    continue
            if _ends_in_exit(statement.body):
                yield Site("drop_recheck", statement, block, _without(block, index),
                           f"the termination re-check `if {shown}: ...` (ending in an exit) is deleted")
            elif isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
                yield Site("drop_recheck", statement, block, _replacing(block, index, _suite_statements(statement.body)),
                           f"the termination re-check `if {shown}:` is removed: its body runs unconditionally")


def _free_before_io_end(function: cst.FunctionDef, code: Code) -> Iterator[Site]:
    for block in _blocks(function):
        body = list(block.body)
        for j, statement in enumerate(body):
            small = _small_statements(statement)
            if len(small) != 1 or not isinstance(small[0], cst.Expr) or not isinstance(small[0].value, cst.Call):
                continue
            if not _FREE_CALL.search(_callee_name(small[0].value)):
                continue
            ends = [i for i in range(j) if _ends_io(body[i])]
            if not ends:
                continue
            i = ends[-1]
            assigned = {name for s in body[i:j] for name in _assigned_names(s)}
            if assigned & set(_identifiers(code(statement))):
                continue  # it reads what the statements it would jump over compute
            # The moved statement keeps its own comment lines; the one it jumps over keeps its own.
            moved = body[:i] + [statement] + body[i:j] + body[j + 1 :]
            yield Site("free_before_io_end", statement, block, block.with_changes(body=moved),
                       f"`{_one_line(code(statement).strip(), 50)}` moves before `{_one_line(code(body[i]).strip(), 50)}`, which ends or waits for IO")


def _ends_io(statement: cst.BaseStatement) -> bool:
    return any(_callee_name(call) in _IO_END_CALLS for call in _calls(statement))


def _assigned_names(statement: cst.BaseStatement) -> set[str]:
    """Local names a statement binds (an attribute or item it assigns binds none)."""
    names: set[str] = set()
    for node in _nodes(statement, (cst.AssignTarget, cst.For, cst.AsName, cst.AnnAssign, cst.AugAssign, cst.NamedExpr)):
        names.update(_bound(getattr(node, "target", None) or getattr(node, "name", None)))
    return names


def _bound(target: cst.CSTNode | None) -> set[str]:
    if isinstance(target, cst.Name):
        return {target.value}
    if isinstance(target, (cst.Tuple, cst.List)):
        return {name for element in target.elements for name in _bound(element.value)}
    return set()


def _drop_namespace_field(function: cst.FunctionDef, code: Code) -> Iterator[Site]:
    for literal in _nodes(function.body, cst.Dict):
        assert isinstance(literal, cst.Dict)
        elements = list(literal.elements)
        if len(elements) < 2:
            continue
        for index, element in enumerate(elements):
            if not isinstance(element, cst.DictElement):
                continue
            kept = elements[:index] + elements[index + 1 :]
            last = kept[-1]
            kept[-1] = last.with_changes(comma=elements[-1].comma)  # the literal keeps its closing punctuation
            yield Site("drop_namespace_field", element, literal, literal.with_changes(elements=kept),
                       f"the namespace forgets a field: `{_one_line(code(element).rstrip(', '), 60)}` is dropped")


OPERATORS = (
    Operator("deadline_flip", "a comparison at a deadline flips strictness (`>` vs `>=`)", _deadline_flip),
    Operator("min_max_swap", "min() and max() swapped", _min_max_swap),
    Operator("reduce_swap", "a cross-rank MIN and MAX swapped", _reduce_swap),
    Operator("or_to_and", "the combine's `or` becomes `and`", _or_to_and, frozenset({"decision", "combine"})),
    Operator("page_plus_one", "off by one page: a count of pages one more", _page_shift("+"),
             frozenset({"decision", "timeout", "commit", "attach", "io_thread", "io_end", "expiry", "hit_query"})),
    Operator("page_minus_one", "off by one page: a count of pages one less", _page_shift("-"),
             frozenset({"decision", "timeout", "commit", "attach", "io_thread", "io_end", "expiry", "hit_query"})),
    Operator("clamp_one_pool", "a clamp over every pool keeps the first pool only", _clamp_one_pool),
    Operator("drop_lock", "a `with lock:` dropped", _drop_lock),
    Operator("remove_guard", "an `if` guard that exits (return, break, continue, raise) deleted", _remove_guard),
    Operator("remove_assign_guard", "an `if` guard that forces a flag (`x = False`) deleted", _remove_assign_guard),
    Operator("drop_recheck", "a termination re-check removed (before a batch, a transfer, a publish)", _drop_recheck),
    Operator("free_before_io_end", "a free moved before the statement that ends or waits for IO", _free_before_io_end),
    Operator("drop_namespace_field", "a field dropped from the storage namespace", _drop_namespace_field, frozenset({"namespace"})),
)

OPERATOR_NAMES = tuple(op.name for op in OPERATORS)
