"""Pass 3: the cross-rank reduce.

Inputs: the parsed method, its `Body`, the configured reduce call names and the
names whose presence marks the vote's reduce (vote, terminated). Output: a
`ReduceSite` with the raw payload elements, the op, and the locals the result
is unpacked into. Normalizing the payload needs the roles; that is left to the
shape pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import libcst as cst

from lint.analysis.body import Body, StmtRec
from lint.cstutil import attributes_named, call_name, dotted_name, last_part, names_read, string_value, walk
from lint.unit import ParsedMethod


@dataclass
class ReduceSite:
    call: cst.Call
    rec: StmtRec
    line: int
    op: str
    elements: Optional[list[cst.BaseExpression]]  # the payload, None when unresolved
    payload_line: int
    slot_names: dict[str, int]  # `a, b = reduce(...)`: local -> payload index
    slot_containers: set[str]  # locals holding the whole reduced payload


def parse_reduce_calls(names: Sequence[str]) -> list[tuple[str, ...]]:
    return [tuple(r.split(".")) for r in names]


def is_reduce_call(call: cst.Call, reduce_calls: Sequence[tuple[str, ...]]) -> bool:
    name = call_name(call)
    if not name:
        return False
    parts = tuple(name.split("."))
    return any(parts[-len(r):] == r for r in reduce_calls)


def find_reduce(parsed: ParsedMethod, body: Body, reduce_calls: Sequence[tuple[str, ...]],
                marks: set[Optional[str]]) -> Optional[ReduceSite]:
    found: list[tuple[StmtRec, cst.Call]] = []
    for rec in body.recs:
        root = rec.value() if isinstance(rec.node, cst.BaseCompoundStatement) else rec.node
        if root is None:
            continue
        for sub in walk(root):
            if isinstance(sub, cst.Call) and is_reduce_call(sub, reduce_calls):
                found.append((rec, sub))
    if not found:
        return None

    def carries_the_vote(item: tuple[StmtRec, cst.Call]) -> bool:
        elements = payload_elements(body, parsed, item[1]) or []
        names: set[str] = set()
        for element in elements:
            names |= names_read(element)
        return bool(names & marks) or any(attributes_named(e, "terminated") for e in elements)

    rec, call = next((item for item in found if carries_the_vote(item)), found[0])
    elements = payload_elements(body, parsed, call)
    payload_line = parsed.line(elements[0]) if elements else parsed.line(call)
    slot_names: dict[str, int] = {}
    containers: set[str] = set()
    if isinstance(rec.node, cst.Assign) and rec.node.value is call:
        target = rec.node.targets[0].target
        if isinstance(target, (cst.Tuple, cst.List)):
            for i, element in enumerate(target.elements):
                if isinstance(element.value, cst.Name):
                    slot_names[element.value.value] = i
        elif isinstance(target, cst.Name):
            containers.add(target.value)
    positional = [a for a in call.args if a.keyword is None]
    if positional and isinstance(positional[0].value, cst.Name):
        containers.add(positional[0].value.value)
    return ReduceSite(call, rec, parsed.line(call), reduce_op(call), elements, payload_line,
                      slot_names, containers)


def payload_elements(body: Body, parsed: ParsedMethod, call: cst.Call) -> Optional[list[cst.BaseExpression]]:
    positional = [a for a in call.args if a.keyword is None]
    if not positional:
        return None
    return _resolve_list(body, positional[0].value, parsed.line(call), 3)


def _resolve_list(body: Body, node: cst.BaseExpression, before_line: int,
                  depth: int) -> Optional[list[cst.BaseExpression]]:
    """The list a payload expression builds: through `torch.tensor([...])` and locals."""
    if depth == 0:
        return None
    if isinstance(node, (cst.List, cst.Tuple)):
        return [e.value for e in node.elements]
    if isinstance(node, cst.Call) and node.args:
        return _resolve_list(body, node.args[0].value, before_line, depth - 1)
    if isinstance(node, cst.Name):
        recs = [r for r in body.bindings.get(node.value, []) if r.line <= before_line]
        value = recs[-1].value() if recs else None
        if value is not None:
            return _resolve_list(body, value, before_line, depth - 1)
    return None


def op_name(node: cst.BaseExpression) -> str:
    text = string_value(node)
    name = text if text is not None else last_part(dotted_name(node))
    return (name or "unknown").upper()


def reduce_op(call: cst.Call) -> str:
    """The `op=` keyword, else a `_max`/`_min` suffix, else SUM for `all_reduce`."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value in ("op", "reduce_op"):
            return op_name(arg.value)
    name = last_part(call_name(call)).lower()
    for suffix in ("max", "min", "sum"):
        if name.endswith("_" + suffix) or name == suffix:
            return suffix.upper()
    if name == "all_reduce":
        return "SUM"  # torch.distributed's default op
    return "unknown"
