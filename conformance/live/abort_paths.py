"""The scheduler's abort paths: each way a tree's scheduler drops a waiting request, and what it tells the cache then.

A request waiting for its prefetch can leave the waiting queue by more than
one path: an abort the scheduler received, a higher-priority request taking
its place, a waiting timeout. Each path must end the request's prefetch (its
IO stops, its slots return); one that drops the request and tells the cache
nothing, or only part of it, leaves IO running into slots nobody reads and
slots nobody frees. The live session takes each path as the tree's scheduler
does (LiveSession.abort_by), read here from the scheduler's source at run
time: every method whose name says abort and that takes a request out of the
waiting queue, and the first cache call it makes, directly or through one
helper method of the scheduler (in source order: where a branch picks
between two calls, the first is the one a deployment with a storage tier
runs). Nothing of the scheduler is imported or copied.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from conformance.live.evidence import SCHEDULER, find, find_all
from conformance.live.tree import SglangTree

# The path the live session's own abort() takes: the handler of an AbortReq the scheduler received.
RECEIVED = "abort_request"
# Before a tree names its cache call there, the release the harness has always called (conformance/live/calls.py).
DEFAULT_CALLS = ("release_aborted_request",)

_ABORT_DEF = r"^\s*def (\w*abort\w*)\("
_DROPS = r"self\.waiting_queue\.(?:pop|remove)\(|self\.waiting_queue\s*=\s*\[|del self\.waiting_queue\["
_CACHE_CALL = re.compile(r"self\.tree_cache\.(\w+)\(")
_HELPER_CALL = re.compile(r"self\.(_\w+)\(")


@dataclass(frozen=True)
class AbortPath:
    name: str  # the scheduler method
    calls: tuple[str, ...]  # the cache methods it calls, in source order (empty: it tells the cache nothing)
    evidence: tuple[str, ...]  # file:line lines: where it drops the request, where it calls the cache

    def call_on(self, cache: object) -> str | None:
        """The cache method this path calls on this cache: the first of its calls the cache has; None: it calls none."""
        return next((name for name in self.calls if callable(getattr(cache, name, None))), None)

    def __str__(self) -> str:
        told = f"calls the cache's {self.calls[0]}" if self.calls else "tells the cache nothing"
        return f"the scheduler's {self.name} drops the waiting request and {told} ({'; '.join(self.evidence)})"


def abort_paths_of(tree: SglangTree) -> dict[str, AbortPath]:
    """Every abort path of the tree's scheduler, by method name, in source order; {} where the scheduler has none to read."""
    paths: dict[str, AbortPath] = {}
    for head in find_all(tree, SCHEDULER, _ABORT_DEF):
        name = re.match(_ABORT_DEF, head.text).group(1)
        drop = find(tree, SCHEDULER, _DROPS, within=re.escape(name))
        if drop is None:
            continue  # it drops nothing from the waiting queue (a running request's abort, a helper)
        calls, cited = _cache_calls(tree, name)
        evidence = (drop.cite(tree, f"the scheduler's {name} takes the request out of the waiting queue"), *cited)
        paths[name] = AbortPath(name, calls, evidence)
    return paths


def _cache_calls(tree: SglangTree, name: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The cache methods `name` calls in source order, directly or through one scheduler helper, with the lines."""
    calls: list[str] = []
    cited: list[str] = []
    for hit in find_all(tree, SCHEDULER, r"self\.(tree_cache\.\w+|_\w+)\(", within=re.escape(name)):
        direct = _CACHE_CALL.search(hit.text)
        if direct:
            found = [(direct.group(1), hit)]
        else:
            helper = _HELPER_CALL.search(hit.text).group(1)
            found = [(m.group(1), h) for h in find_all(tree, SCHEDULER, r"self\.tree_cache\.\w+\(", within=re.escape(helper))
                     for m in [_CACHE_CALL.search(h.text)] if m]
        for method, line in found:
            if method not in calls:
                calls.append(method)
                cited.append(line.cite(tree, f"{name} calls the cache's {method}"))
    return tuple(calls), tuple(cited)
