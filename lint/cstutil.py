"""Small, side-effect-free helpers over libcst expression nodes: the one set the
analysis reads code with. The stdlib tree (lint/locate.py) only finds methods
and indexes a class; a helper method, module function or attribute value it
indexes is read through `as_cst`."""

from __future__ import annotations

import ast
import dataclasses
from typing import Iterator, Optional

import libcst as cst

POLICIES = ("best_effort", "wait_complete", "timeout")
VOTING_POLICIES = frozenset({"wait_complete", "timeout"})

_CASTS = {"int", "bool", "float"}


def as_cst(node: ast.AST, cache: dict[int, Optional[cst.CSTNode]]) -> Optional[cst.CSTNode]:
    """The libcst form of an indexed stdlib node (a function or an expression), parsed
    once per node; None when libcst cannot read it back."""
    key = id(node)
    if key not in cache:
        try:
            text = ast.unparse(node)
            if isinstance(node, ast.expr):
                cache[key] = cst.parse_expression(text)
            else:
                cache[key] = cst.parse_module(text + "\n").body[0]
        except (cst.ParserSyntaxError, ValueError, RecursionError, IndexError):
            cache[key] = None
    return cache[key]


def dotted_name(node: cst.CSTNode) -> Optional[str]:
    """`a.b.c` for Name/Attribute chains, None for anything else."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = dotted_name(node.value)
        return None if base is None else f"{base}.{node.attr.value}"
    return None


def call_name(call: cst.Call) -> Optional[str]:
    """Dotted name of the called function; `self.x.f(...)` gives 'self.x.f'."""
    return dotted_name(call.func)


def last_part(name: Optional[str]) -> str:
    return "" if not name else name.rsplit(".", 1)[-1]


def string_value(node: cst.CSTNode) -> Optional[str]:
    if isinstance(node, (cst.SimpleString, cst.ConcatenatedString)):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def is_name(node: Optional[cst.CSTNode], *values: str) -> bool:
    """`node` is a Name, one of `values` when any are given (libcst.matchers costs 150 ms to import)."""
    return isinstance(node, cst.Name) and (not values or node.value in values)


def is_false_constant(node: Optional[cst.CSTNode]) -> bool:
    return is_name(node, "False") or (isinstance(node, cst.Integer) and node.value == "0")


_FIELDS: dict[type, tuple[str, ...]] = {}
# Fields holding only layout (whitespace, parentheses, punctuation): never reads.
_LAYOUT_FIELDS = frozenset({
    "lpar", "rpar", "comma", "leading_lines", "lines_after_decorators", "header", "footer",
    "newline", "semicolon", "dot", "colon", "equal", "trailing_whitespace", "lbracket",
    "rbracket", "lbrace", "rbrace", "star", "star_tok",
})


def _all_children(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    # Reading dataclass fields directly is much cheaper than CSTNode.children,
    # which runs a visitor; whitespace and tokens come along, harmlessly.
    names = _FIELDS.get(type(node))
    if names is None:
        names = _FIELDS[type(node)] = tuple(
            f.name for f in dataclasses.fields(node)
            if f.name not in _LAYOUT_FIELDS and not f.name.startswith("whitespace")
        )
    for name in names:
        value = getattr(node, name)
        if isinstance(value, cst.CSTNode):
            yield value
        elif isinstance(value, (list, tuple)):
            for item in value:
                if isinstance(item, cst.CSTNode):
                    yield item


def children(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Children that can hold reads: skips attribute names and keyword names."""
    if isinstance(node, cst.Attribute):
        yield node.value
        return
    if isinstance(node, cst.Arg):
        yield node.value
        return
    yield from _all_children(node)


def walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Pre-order walk, not entering attribute or keyword-argument names."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(list(children(current))))


def names_read(node: Optional[cst.CSTNode]) -> set[str]:
    if node is None:
        return set()
    return {n.value for n in walk(node) if isinstance(n, cst.Name)}


def attribute_read(node: cst.CSTNode) -> Optional[str]:
    """The attribute `node` reads: `obj.name`, or the key of `getattr(obj, "name", ...)`; else None."""
    if isinstance(node, cst.Attribute):
        return node.attr.value
    if isinstance(node, cst.Call) and is_name(node.func, "getattr") and len(node.args) >= 2:
        return string_value(node.args[1].value)
    return None


def attributes_named(node: Optional[cst.CSTNode], fragment: str) -> list[cst.CSTNode]:
    """Attribute accesses (or getattr string keys) whose name contains `fragment`."""
    if node is None:
        return []
    found: list[cst.CSTNode] = []
    for sub in walk(node):
        name = attribute_read(sub)
        if name is not None and fragment in name.lower():
            found.append(sub)
    return found


def reads_completion(node: Optional[cst.CSTNode]) -> bool:
    """True when the expression reads `completed_tokens` or calls a '*complet*' helper."""
    if node is None:
        return False
    for sub in walk(node):
        if isinstance(sub, cst.Attribute) and sub.attr.value == "completed_tokens":
            return True
        if isinstance(sub, cst.Call) and "complet" in last_part(call_name(sub)).lower():
            return True
    return False


def looks_boolean(node: cst.CSTNode) -> bool:
    if isinstance(node, (cst.Comparison, cst.BooleanOperation)):
        return True
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Not):
        return True
    if isinstance(node, cst.Name) and node.value in ("True", "False"):
        return True
    if isinstance(node, cst.Call):
        name = last_part(call_name(node)).lower()
        return "complet" in name or name == "bool"
    return False


def strip_casts(node: cst.BaseExpression) -> cst.BaseExpression:
    """`int(x)`, `bool(x)`, `float(x)` -> x (repeatedly)."""
    while (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Name)
        and node.func.value in _CASTS
        and len(node.args) == 1
    ):
        node = node.args[0].value
    return node


def one_minus(node: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """`x` for `1 - x` (casts around either side stripped), else None."""
    node = strip_casts(node)
    if (isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Subtract)
            and isinstance(node.left, cst.Integer) and node.left.value == "1"):
        return strip_casts(node.right)
    return None


def operands(node: cst.BaseExpression, operator: Optional[type] = None) -> Optional[list[cst.BaseExpression]]:
    """Operands of a top-level `a or b or c` (or `and`) chain of `operator` (cst.Or, cst.And; by default
    the node's own), None when the node is not one."""
    if not isinstance(node, cst.BooleanOperation) or not isinstance(node.operator, operator or type(node.operator)):
        return None
    out: list[cst.BaseExpression] = []
    for side in (node.left, node.right):
        sub = operands(side, type(node.operator))
        out.extend(sub if sub is not None else [side])
    return out


def policy_test(test: cst.BaseExpression) -> Optional[tuple[bool, frozenset[str]]]:
    """Read a stop-policy comparison.

    Returns (positive, policies): positive is True for `==`/`in` and False for
    `!=`/`not in`. None when the test is not a policy comparison.
    """
    ors = operands(test, cst.Or)
    if ors is not None:
        parts = [policy_test(o) for o in ors]
        if parts and all(p is not None and p[0] for p in parts):
            return True, frozenset().union(*(p[1] for p in parts if p))
        return None
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return None
    target = test.comparisons[0]
    op = target.operator
    left, right = test.left, target.comparator
    if isinstance(op, (cst.Equal, cst.NotEqual, cst.Is, cst.IsNot)):
        for value_side, other in ((right, left), (left, right)):
            policy = _policy_constant(value_side, other)
            if policy:
                return isinstance(op, (cst.Equal, cst.Is)), frozenset({policy})
        return None
    if isinstance(op, (cst.In, cst.NotIn)) and isinstance(right, (cst.Tuple, cst.List, cst.Set)):
        found = {_policy_constant(el.value, left) for el in right.elements}
        if found and None not in found:
            return isinstance(op, cst.In), frozenset(p for p in found if p)
    return None


def _policy_constant(node: cst.CSTNode, other: cst.CSTNode) -> Optional[str]:
    text = string_value(node)
    if text is not None:
        return text if text in POLICIES else None
    if isinstance(node, cst.Attribute) and node.attr.value.lower() in POLICIES:
        other_name = (dotted_name(other) or "").lower()
        if "polic" in other_name:
            return node.attr.value.lower()
    return None
