"""Where in the implementation's code each trace event was recorded: the frames just outside the harness.

A trace event says what happened; a bug report also says where. attach(trace)
wraps the record() of one TraceRecorder instance (never the class) so that
each event's seq maps to the innermost frames of code that belongs neither to
this package, nor to the spec, nor to the standard library: the
implementation's own lines (for SGLang's live objects, upstream's caller of
the method a tap wraps). Where the implementation runs code it compiled
from a source file rather than imported (an adapter running upstream's own
decision from the user's tree), that code is what is judged: the site starts
at its innermost such frame, not at the adapter's stand-ins it called. Paths
are shown from the implementation's top-level package down
("sglang/srt/mem_cache/hiradix_cache.py:812"), so a report reads the same on
every machine.
"""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path
from types import FrameType
from typing import Any, Mapping

SITES_ATTR = "_conformance_sites"  # the {seq: site} of an attached trace
FRAMES = 3  # frames kept per event: where it happened and the callers that decided it
MAX_DEPTH = 64  # implementation frames looked through per event, for code compiled from a file

_PACKAGE = Path(__file__).resolve().parents[1]  # the conformance package
_SPEC = _PACKAGE.parent / "spec"
_STDLIB = Path(sysconfig.get_paths()["stdlib"]).resolve()
# Top-level packages that run the tests, never the implementation: their frames are the harness's too.
RUNNERS = ("_pytest", "pytest", "pluggy", "xdist", "execnet", "__channelexec__", "torch")
_harness: dict[str, bool] = {}
_packaged: dict[str, str] = {}


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


def package_path(filename: str) -> str:
    """A file no import loaded, from its outermost package folder down ('sglang/srt/mem_cache/x.py'); else its name."""
    known = _packaged.get(filename)
    if known is None:
        path = Path(filename)
        top = next((parent for parent in reversed(path.parents) if (parent / "__init__.py").is_file()), None)
        known = _packaged[filename] = path.relative_to(top.parent).as_posix() if top is not None else path.name
    return known


def _imported(frame: FrameType) -> bool:
    """Whether the frame runs a module an import loaded (not code compiled from a file by the code calling it)."""
    module = sys.modules.get(str(frame.f_globals.get("__name__", "")))
    return module is not None and getattr(module, "__file__", None) == frame.f_code.co_filename


def _describe(frame: FrameType) -> str:
    code = frame.f_code
    shown = (shown_path(code.co_filename, str(frame.f_globals.get("__name__", ""))) if _imported(frame)
             else package_path(code.co_filename))
    return f"{shown}:{frame.f_lineno} ({code.co_name})"


def site_of(frame: FrameType | None) -> str | None:
    """'path:line (function)' of the innermost frames outside the harness, innermost first, joined by ' < '.

    The implementation's frames run until the harness resumes; code among them
    that was compiled from a file rather than imported starts the site.
    """
    chain: list[FrameType] = []
    while frame is not None and len(chain) < MAX_DEPTH:
        code = frame.f_code
        if not _is_harness(code.co_filename, str(frame.f_globals.get("__name__", ""))):
            chain.append(frame)
        elif chain:
            break  # back in the harness: the implementation's frames ended
        frame = frame.f_back
    start = next((i for i, f in enumerate(chain) if not _imported(f)), 0)
    return " < ".join(_describe(f) for f in chain[start:start + FRAMES]) or None


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
