"""Where in the implementation's code each trace event was recorded: the frames just outside the harness.

A trace event says what happened; a bug report also says where. attach(trace)
wraps the record() of one TraceRecorder instance (never the class) so that
each event's seq maps to the innermost frames of code that belongs neither to
this package, nor to the spec, nor to the standard library: the
implementation's own lines (for SGLang's live objects, upstream's caller of
the method a tap wraps). Paths are shown from the implementation's top-level
package down ("sglang/srt/mem_cache/hiradix_cache.py:812"), so a report
reads the same on every machine.
"""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path
from types import FrameType
from typing import Any, Mapping

SITES_ATTR = "_conformance_sites"  # the {seq: site} of an attached trace
FRAMES = 3  # frames kept per event: where it happened and the callers that decided it

_PACKAGE = Path(__file__).resolve().parents[1]  # the conformance package
_SPEC = _PACKAGE.parent / "spec"
_STDLIB = Path(sysconfig.get_paths()["stdlib"]).resolve()
# Top-level packages that run the tests, never the implementation: their frames are the harness's too.
RUNNERS = ("_pytest", "pytest", "pluggy", "xdist", "execnet", "__channelexec__", "torch")
_harness: dict[str, bool] = {}


def _is_harness(filename: str, module: str) -> bool:
    known = _harness.get(filename)
    if known is None:
        path = Path(filename).resolve() if not filename.startswith("<") else None
        known = path is None or _PACKAGE in path.parents or _SPEC in path.parents or module.split(".")[0] in RUNNERS or (
            _STDLIB in path.parents and not {"site-packages", "dist-packages"} & set(path.parts))
        _harness[filename] = known
    return known


def shown_path(filename: str, module: str) -> str:
    """The file as its module names it ('sglang/srt/mem_cache/x.py'), the same on every machine; a script by its name."""
    if not module or module == "__main__":
        return Path(filename).name
    tail = "/__init__.py" if Path(filename).name == "__init__.py" else ".py"
    return module.replace(".", "/") + tail


def site_of(frame: FrameType | None) -> str | None:
    """'path:line (function)' of the innermost frames outside the harness, innermost first, joined by ' < '."""
    found = []
    while frame is not None and len(found) < FRAMES:
        code = frame.f_code
        module = str(frame.f_globals.get("__name__", ""))
        if not _is_harness(code.co_filename, module):
            found.append(f"{shown_path(code.co_filename, module)}:{frame.f_lineno} ({code.co_name})")
        elif found:
            break  # back in the harness: the implementation's frames ended
        frame = frame.f_back
    return " < ".join(found) or None


def attach(trace: Any) -> Any:
    """Make `trace` remember where each event it records came from (idempotent); returns it."""
    if getattr(trace, SITES_ATTR, None) is not None:
        return trace
    sites: dict[int, str] = {}
    original = trace.record

    def record(kind: Any, **fields: Any) -> Any:
        event = original(kind, **fields)
        if event.seq >= 0:  # a NullRecorder's placeholder event has none
            site = site_of(sys._getframe(1))
            if site is not None:
                sites[event.seq] = site
        return event

    trace.record = record
    setattr(trace, SITES_ATTR, sites)
    return trace


def sites(trace: Any) -> Mapping[int, str]:
    """{seq: site} of an attached trace (empty for one never attached)."""
    return getattr(trace, SITES_ATTR, None) or {}
