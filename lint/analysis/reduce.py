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
from lint.cstutil import as_cst, attributes_named, call_name, dotted_name, last_part, names_read, string_value, walk
from lint.locate import ClassIndex
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


def _matches(name: Optional[str], reduce_calls: Sequence[tuple[str, ...]]) -> bool:
    if not name:
        return False
    parts = tuple(name.split("."))
    return any(parts[-len(r):] == r for r in reduce_calls)


@dataclass(frozen=True)
class Helper:
    """A `self` method that runs a configured reduce on its own parameters
    (upstream's `_all_reduce_attn_groups(tensor, op)` loops over groups)."""

    payload_arg: int  # which call-site positional argument is the payload
    op_arg: Optional[int]  # which one is the op; None when the helper fixes it
    op: str


def reduce_helper(index: ClassIndex, name: str, reduce_calls: Sequence[tuple[str, ...]]) -> Optional[Helper]:
    func = index.methods.get(name)
    node = as_cst(func, index.cst_nodes) if func is not None else None
    if not isinstance(node, cst.FunctionDef):
        return None
    params = [p.name.value for p in (*node.params.posonly_params, *node.params.params)][1:]
    for call in walk(node):
        if not (isinstance(call, cst.Call) and _matches(call_name(call), reduce_calls) and call.args
                and call.args[0].keyword is None and not call.args[0].star):
            continue
        first = call.args[0].value
        if not (isinstance(first, cst.Name) and first.value in params):
            continue
        op_arg: Optional[int] = None
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value in ("op", "reduce_op") and isinstance(
                    arg.value, cst.Name) and arg.value.value in params:
                op_arg = params.index(arg.value.value)
        return Helper(params.index(first.value), op_arg, reduce_op(call))
    return None


@dataclass(frozen=True)
class ReduceCall:
    call: cst.Call
    payload: Optional[cst.BaseExpression]
    op: str


def reduce_call(call: cst.Call, reduce_calls: Sequence[tuple[str, ...]],
                index: Optional[ClassIndex]) -> Optional[ReduceCall]:
    """A configured reduce, or a call of a `self` helper that runs one."""
    name = call_name(call)
    positional = [a.value for a in call.args if a.keyword is None]
    if _matches(name, reduce_calls):
        return ReduceCall(call, positional[0] if positional else None, reduce_op(call))
    if index is None or not name or not name.startswith("self.") or name.count(".") != 1:
        return None
    if name[5:] not in index.methods and positional and _named_like_a_reduce(name[5:], reduce_calls):
        # inherited or defined elsewhere (0.5.2x's `self._all_reduce(tensor, ReduceOp.MAX)`): the name says it
        return ReduceCall(call, positional[0], reduce_op(call, positional[1:]))
    helper = reduce_helper(index, name[5:], reduce_calls)
    if helper is None or helper.payload_arg >= len(positional):
        return None
    op = helper.op
    if helper.op_arg is not None:
        op = op_name(positional[helper.op_arg]) if helper.op_arg < len(positional) else "unknown"
    return ReduceCall(call, positional[helper.payload_arg], op)


def _named_like_a_reduce(method: str, reduce_calls: Sequence[tuple[str, ...]]) -> bool:
    bare = method.lstrip("_")
    return any(bare.startswith(r[-1]) for r in reduce_calls)


def find_reduce(parsed: ParsedMethod, body: Body, reduce_calls: Sequence[tuple[str, ...]],
                marks: set[Optional[str]]) -> Optional[ReduceSite]:
    found: list[tuple[StmtRec, ReduceCall]] = []
    index = parsed.site.index
    for rec in body.recs:
        root = rec.value() if isinstance(rec.node, cst.BaseCompoundStatement) else rec.node
        if root is None:
            continue
        for sub in walk(root):
            if isinstance(sub, cst.Call):
                hit = reduce_call(sub, reduce_calls, index)
                if hit is not None:
                    found.append((rec, hit))
    if not found:
        return None

    def carries_the_vote(item: tuple[StmtRec, ReduceCall]) -> bool:
        elements = payload_elements(body, parsed, item[1]) or []
        names: set[str] = set()
        for element in elements:
            names |= names_read(element)
        return bool(names & marks) or any(attributes_named(e, "terminated") for e in elements)

    rec, hit = next((item for item in found if carries_the_vote(item)), found[0])
    call = hit.call
    elements = payload_elements(body, parsed, hit)
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
    if isinstance(hit.payload, cst.Name):
        containers.add(hit.payload.value)  # reduced in place (torch.distributed.all_reduce)
    return ReduceSite(call, rec, parsed.line(call), hit.op, elements, payload_line, slot_names, containers)


def payload_elements(body: Body, parsed: ParsedMethod, hit: ReduceCall) -> Optional[list[cst.BaseExpression]]:
    if hit.payload is None:
        return None
    return _resolve_list(body, hit.payload, parsed.line(hit.call), 3)


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


def reduce_op(call: cst.Call, rest: Sequence[cst.BaseExpression] = ()) -> str:
    """The `op=` keyword, else a positional `ReduceOp.X` among `rest` (a reduce helper's arguments after
    the payload), else a `_max`/`_min` suffix, else SUM for `all_reduce`."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value in ("op", "reduce_op"):
            return op_name(arg.value)
    for value in rest:
        if "ReduceOp" in (dotted_name(value) or ""):
            return op_name(value)
    return _suffix_op(call_name(call) or "")


def _suffix_op(name: str) -> str:
    name = last_part(name).lower()
    for suffix in ("max", "min", "sum"):
        if name.endswith("_" + suffix) or name == suffix:
            return suffix.upper()
    if name == "all_reduce":
        return "SUM"  # torch.distributed's default op
    return "unknown"
