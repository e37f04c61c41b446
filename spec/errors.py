"""The one error type for bad configuration, shared by every package, and the base the caches' errors share.

A ConfigError renders as a single line naming the field, the value given and
what is accepted, so a CLI or a test can show it without a traceback. The
value is shown bounded (`bounded_repr`): an array or a tensor by its dtype,
shape and first values, never its multi-line dump.

`CacheError` lives here, not in caches/, because spec depends on nothing of
ours: caches/errors.py derives its whole hierarchy from it, and a ConfigError
is one, so every error a cache raises on purpose is a caches.CacheError.
"""

from __future__ import annotations

import reprlib
from typing import Any

VALUE_REPR_CHARS = 120  # enough to recognise a value in a message, never a dump
_FIRST_VALUES = 4

_repr = reprlib.Repr()
_repr.maxstring = _repr.maxother = VALUE_REPR_CHARS
_repr.maxlist = _repr.maxtuple = _repr.maxset = _repr.maxdict = 8


class CacheError(Exception):
    """Base class of every error a hierarchical cache, or its configuration, raises on purpose."""


class ConfigError(CacheError, ValueError):
    """A configuration field holds a value the spec does not accept."""

    def __init__(self, field: str, value: Any, accepted: str) -> None:
        self.field = field
        self.value = value
        self.accepted = accepted
        super().__init__(f"invalid {field}: {bounded_repr(value)} (accepted: {accepted})")


def bounded_repr(value: Any) -> str:
    """`value` as one line of at most VALUE_REPR_CHARS characters; an array by type, dtype, shape and first values."""
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is not None and dtype is not None and hasattr(value, "reshape"):
        text = f"{type(value).__name__}(dtype={dtype}, shape={tuple(shape)}{_first_values(value)})"
    else:
        text = _repr.repr(value)
    if "\n" in text:
        text = " ".join(text.split())
    return text if len(text) <= VALUE_REPR_CHARS else text[: VALUE_REPR_CHARS - 3] + "..."


def _first_values(array: Any) -> str:
    try:
        flat = array.reshape(-1)
        first = flat[:_FIRST_VALUES].tolist()
        more = ", ..." if len(flat) > _FIRST_VALUES else ""
    except Exception:  # a meta tensor, or an array type without these: dtype and shape say enough
        return ""
    return ", values=[" + ", ".join(map(repr, first)) + more + "]"
