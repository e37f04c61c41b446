"""Building a cache whose constructor takes its parts as arguments (trees before CacheInitParams, 2025-11), as the tree's
own scheduler builds it.

Newer trees take `(params, server_args)`; older ones take the device tier,
the TP group and the page size, and then each hicache setting as its own
argument. Which ServerArgs field feeds each argument is read from the tree's
scheduler (its `HiRadixCache(... name=server_args.field ...)` call); an
argument named like a ServerArgs field takes that field; an argument neither
names, and without a default, refuses the build with one line.
"""

from __future__ import annotations

import inspect
import re
from typing import Any, Mapping

from conformance.errors import ConformanceError
from conformance.live.evidence import SCHEDULER
from conformance.live.tree import SglangTree


class LiveBuildError(ConformanceError):
    """The tree's cache cannot be built the way its scheduler builds it: one line naming what is missing."""


def scheduler_fields(tree: SglangTree, class_name: str) -> dict[str, str]:
    """argument -> ServerArgs field, from the scheduler's call that builds `class_name` (empty where none is found)."""
    path = tree.package / SCHEDULER
    text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
    start = text.find(f"{class_name}(")
    if start < 0:
        return {}
    depth, end = 0, start + len(class_name)
    for end in range(start + len(class_name), len(text)):
        depth += {"(": 1, ")": -1}.get(text[end], 0)
        if depth == 0:
            break
    call = text[start:end]
    return dict(re.findall(r"(\w+)=\s*(?:self\.)?server_args\.(\w+)", call))


def build_from_arguments(tree: SglangTree, cls: type, args: Any, parts: Mapping[str, Any]) -> Any:
    """cls(...) with `parts` (the harness's tier: pools, allocator, group, page size) and each setting from `args`."""
    fields = scheduler_fields(tree, cls.__name__)
    kwargs: dict[str, Any] = {}
    for name, parameter in inspect.signature(cls.__init__).parameters.items():
        if name == "self" or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        if name in parts:
            kwargs[name] = parts[name]
        elif name in fields and hasattr(args, fields[name]):
            kwargs[name] = getattr(args, fields[name])
        elif hasattr(args, name):
            kwargs[name] = getattr(args, name)
        elif parameter.default is parameter.empty:
            raise LiveBuildError(f"{cls.__name__}.__init__ of this tree takes `{name}`, which neither its scheduler's call "
                                 f"nor a ServerArgs field of the same name supplies")
    return cls(**kwargs)
