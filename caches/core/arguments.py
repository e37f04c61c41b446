"""Argument checks the public methods run before they allocate anything.

Each bad value is one CacheArgumentError line naming the argument, the value
and what is accepted; nothing is converted silently (a float, a bool or a
string is never taken for a token id).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any

import torch

from caches.core.hashing import TOKEN_ID_LIMIT
from caches.errors import BadTokensError, CacheArgumentError

TOKEN_ID = f"a token id, an integer in [0, {TOKEN_ID_LIMIT})"
TOKEN_LIST = f"a list of token ids (integers in [0, {TOKEN_ID_LIMIT})) or an integer tensor of one dimension"
REQUEST_IDS = "a list of non-empty request id strings"
_U32 = next(code for code in ("I", "L") if array(code).itemsize == 4)


def checked_tokens(tokens: Any) -> list[int]:
    """Token ids as a plain list of ints, or BadTokensError naming the first bad one."""
    if isinstance(tokens, (str, bytes, bytearray, memoryview)):
        raise BadTokensError("tokens", tokens, TOKEN_LIST + ", not one string")
    dtype = getattr(tokens, "dtype", None)
    if dtype is not None and hasattr(tokens, "tolist"):  # a torch tensor or a numpy array
        shape = tuple(tokens.shape)
        if len(shape) != 1:
            raise BadTokensError("tokens", f"a tensor of shape {shape}", TOKEN_LIST)
        if not _integral(dtype):
            raise BadTokensError("tokens", f"a {dtype} tensor", TOKEN_LIST)
        tokens = tokens.tolist()
    elif not isinstance(tokens, Sequence):
        raise BadTokensError("tokens", tokens, TOKEN_LIST)
    try:
        # C speed for the common case; it refuses floats, strings, None, nested
        # lists and ids out of range, but takes bools for 0 and 1.
        packed = array(_U32, tokens)
    except (TypeError, OverflowError, ValueError):
        packed = None
    if packed is None or bool in set(map(type, tokens)):
        raise _bad_token(tokens)
    return packed.tolist()


def _integral(dtype: Any) -> bool:
    if isinstance(dtype, torch.dtype):
        return not (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool)
    return getattr(dtype, "kind", None) in ("i", "u")  # numpy


def _bad_token(tokens: Sequence[Any]) -> BadTokensError:
    """The error naming the first token the packer refused."""
    for index, token in enumerate(tokens):
        if isinstance(token, bool) or not hasattr(token, "__index__"):
            return BadTokensError(f"tokens[{index}]", token, TOKEN_ID)
        try:
            value = token.__index__()
        except (TypeError, ValueError):  # a tensor of floats, or of more than one element
            return BadTokensError(f"tokens[{index}]", token, TOKEN_ID)
        if not 0 <= value < TOKEN_ID_LIMIT:
            return BadTokensError(f"tokens[{index}]", token, TOKEN_ID)
    return BadTokensError("tokens", tokens, TOKEN_LIST)  # the packer refused a list no check above does


def checked_request_id(request_id: Any) -> str:
    if not isinstance(request_id, str) or not request_id:
        raise CacheArgumentError("request_id", request_id, "a non-empty string")
    return request_id


def checked_request_ids(request_ids: Any) -> list[str]:
    """One rule for every cache's check_prefetch_progress."""
    if isinstance(request_ids, (str, bytes, bytearray)) or not isinstance(request_ids, (list, tuple)):
        raise CacheArgumentError("request_ids", request_ids, REQUEST_IDS)
    for index, request_id in enumerate(request_ids):
        if not isinstance(request_id, str) or not request_id:
            raise CacheArgumentError(f"request_ids[{index}]", request_id, REQUEST_IDS)
    return list(request_ids)


def checked_count(field: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CacheArgumentError(field, value, "an integer >= 0")
    return value
