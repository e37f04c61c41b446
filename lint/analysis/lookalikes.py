"""Pass 4b: attributes (or getattr keys) the method reads whose names look like the
completion flag but are not it, with the line of each first read.

Inputs: the parsed method and its `Body`. Output: `(name, line)` pairs in line
order; HC101 names them, since the guard pass does not see them as the flag.
"""

from __future__ import annotations

import libcst as cst

from lint.analysis.body import Body
from lint.cstutil import is_name, string_value, walk
from lint.pools import looks_like_flag
from lint.unit import ParsedMethod


def find_lookalikes(parsed: ParsedMethod, body: Body, flag: str) -> tuple[tuple[str, int], ...]:
    found: dict[str, int] = {}
    for rec in body.recs:
        value = rec.value()
        if value is None:
            continue
        for sub in walk(value):
            name = None
            if isinstance(sub, cst.Attribute):
                name = sub.attr.value
            elif isinstance(sub, cst.Call) and is_name(sub.func, "getattr") and len(sub.args) >= 2:
                name = string_value(sub.args[1].value)
            if name and name not in found and looks_like_flag(name, flag):
                found[name] = parsed.line(sub)
    return tuple(sorted(found.items(), key=lambda item: item[1]))
