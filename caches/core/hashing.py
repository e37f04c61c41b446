"""Chained page hashes: the storage key of a KV page.

A page hash is the lowercase hex SHA-256 over the previous page's hash bytes (absent
for the first page) followed by each token id as 4 bytes little-endian unsigned.
Because of the chaining, one hash identifies the page *and* its whole prefix.
"""

from __future__ import annotations

import hashlib
import sys
from array import array
from collections.abc import Sequence
from typing import Any

from caches.errors import BadTokensError, CacheArgumentError

__all__ = ["TOKEN_ID_LIMIT", "page_hash", "page_hashes"]

TOKEN_ID_LIMIT = 2**32
_TOKEN_ID = f"an integer in [0, {TOKEN_ID_LIMIT})"
_HASH_HEX_LEN = 64

# The array typecode holding exactly 4-byte unsigned ints on this platform.
_U32 = next(code for code in ("I", "L") if array(code).itemsize == 4)
_NEEDS_BYTESWAP = sys.byteorder != "little"


def _token_list(tokens: Any) -> Sequence[int]:
    """Tensors become plain lists once (iterating a tensor yields 0-d tensors: slow)."""
    tolist = getattr(tokens, "tolist", None)
    if tolist is not None and not isinstance(tokens, (list, tuple)):
        return tolist()
    return tokens


def _bad_token_error(tokens: Sequence[Any]) -> BadTokensError:
    for index, token in enumerate(tokens):
        try:
            value = int(token) if not isinstance(token, float) else None
        except (TypeError, ValueError):
            value = None
        if value is None or value != token or not 0 <= value < TOKEN_ID_LIMIT:
            return BadTokensError(f"token id at position {index}", token, _TOKEN_ID)
    return BadTokensError("tokens", tokens, f"a sequence of {_TOKEN_ID}s")


def _token_bytes(tokens: Sequence[int]) -> bytes:
    try:
        packed = array(_U32, tokens)
    except (OverflowError, TypeError) as exc:
        raise _bad_token_error(tokens) from exc
    if _NEEDS_BYTESWAP:
        packed.byteswap()
    return packed.tobytes()


def _prev_digest(prev: str | None) -> bytes:
    if prev is None:
        return b""
    if isinstance(prev, str) and len(prev) == _HASH_HEX_LEN:
        try:
            return bytes.fromhex(prev)
        except ValueError:
            pass
    raise CacheArgumentError("prev", prev, f"None or a {_HASH_HEX_LEN}-character hex SHA-256")


def page_hash(prev: str | None, page_tokens: Sequence[int]) -> str:
    """Hash of one page chained onto ``prev`` (the previous page's hash, or None)."""
    digest = hashlib.sha256(_prev_digest(prev))
    digest.update(_token_bytes(_token_list(page_tokens)))
    return digest.hexdigest()


def page_hashes(
    tokens: Sequence[int], page_size: int, prev: str | None = None
) -> list[str]:
    """One chained hash per full page of ``tokens``; a trailing partial page is ignored."""
    if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size <= 0:
        raise CacheArgumentError("page_size", page_size, "an integer > 0")
    token_list = _token_list(tokens)
    num_pages = len(token_list) // page_size
    if num_pages == 0:
        _prev_digest(prev)  # still reject a malformed prev
        return []
    # Pack every full page in one call, then hash fixed-size slices of the buffer.
    data = memoryview(_token_bytes(token_list[: num_pages * page_size]))
    page_bytes = page_size * 4
    chained = _prev_digest(prev)
    hashes: list[str] = []
    sha256 = hashlib.sha256
    for start in range(0, num_pages * page_bytes, page_bytes):
        digest = sha256(chained)
        digest.update(data[start : start + page_bytes])
        chained = digest.digest()
        hashes.append(chained.hex())
    return hashes
