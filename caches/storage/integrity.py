"""Page checksums: how a backend tells a damaged or misplaced page from a good one.

``sum64`` (the default): the wrapping sum of a page's little-endian 64-bit
words (a short last word zero-padded). One single-threaded numpy reduction
over the page's uint64 view (no intra-op thread pool: on a busy machine
torch's parallel reduction waits for a descheduled helper thread and ran
at 2 GiB/s where this runs at tens of GiB/s); pages lying evenly spaced in
one buffer (a batch of host pool pages) are summed in one call. What it
detects: every change confined to one 64-bit word (any flipped bit or
byte, anywhere in the payload, the zero-padded tail included) and random
damage with probability 1 - 2**-64; a page stored or moved under another
key, since the checksum is bound to the key (see below). It misses
reordered words and changes that cancel exactly (one bit flipped up in one
word and the same bit flipped down in another).

``crc32`` (zlib): detects every error of up to three bits and every burst of
up to 32, but runs at about 3 GiB/s on one core, which halves prefetch
throughput from page-cached files (see docs/performance.md).

A stored checksum is bound to its key (``bound_checksum``), so a page copied
or renamed under another key fails verification like a damaged one.
"""

from __future__ import annotations

import zlib
from typing import Sequence

import numpy as np
import torch

from caches.core.pools import tensor_bytes_view
from caches.errors import StorageConfigError
from spec.errors import bounded_repr

__all__ = ["CHECKSUMS", "DEFAULT_CHECKSUM", "bound_checksum", "checksum", "checksums"]

# name -> the id stored in a page header (0 is never used: a zeroed header is no page)
CHECKSUMS = {"sum64": 1, "crc32": 2}
DEFAULT_CHECKSUM = "sum64"
_MASK = 2**64 - 1


def _bytes_of(page: torch.Tensor) -> torch.Tensor:
    return page.reshape(-1).view(torch.uint8)


def _sum64(raw: torch.Tensor) -> int:
    whole = raw.numel() - raw.numel() % 8
    total = 0
    if whole:
        words = raw[:whole]
        if words.storage_offset() % 8:
            words = words.clone()  # a page at an odd byte offset: realign once
        total = int(np.add.reduce(words.numpy().view(np.uint64)))
    if whole < raw.numel():
        total += int.from_bytes(bytes(raw[whole:].tolist()), "little")
    return total & _MASK


def checksum(algorithm: str, page: torch.Tensor) -> int:
    """The checksum of one contiguous CPU page."""
    if algorithm == "sum64":
        return _sum64(_bytes_of(page))
    if algorithm == "crc32":
        return zlib.crc32(tensor_bytes_view(page))
    raise StorageConfigError(f"checksum algorithm {bounded_repr(algorithm)} is unknown: accepted are {', '.join(CHECKSUMS)}")


def checksums(algorithm: str, pages: Sequence[torch.Tensor]) -> list[int]:
    """Checksums of many pages; one vectorized call when they lie evenly spaced in one buffer."""
    if algorithm == "sum64" and len(pages) > 1:
        strided = _evenly_spaced_words(pages)
        if strided is not None:
            return np.add.reduce(strided.numpy().view(np.uint64), axis=1).tolist()
    return [checksum(algorithm, page) for page in pages]


def _evenly_spaced_words(pages: Sequence[torch.Tensor]) -> torch.Tensor | None:
    """A [pages, words] int64 view over the pages' shared buffer, or None when they do not allow one."""
    first = pages[0]
    nbytes = first.numel() * first.element_size()
    storage = first.untyped_storage()
    offsets = [p.storage_offset() * p.element_size() for p in pages]
    stride = offsets[1] - offsets[0]
    if nbytes == 0 or nbytes % 8 or stride <= 0 or stride % 8 or offsets[0] % 8:
        return None
    for page, offset, expected in zip(pages, offsets, range(offsets[0], offsets[0] + stride * len(pages), stride)):
        same_buffer = page.untyped_storage().data_ptr() == storage.data_ptr()
        if offset != expected or not same_buffer or page.numel() * page.element_size() != nbytes:
            return None
    whole = torch.empty(0, dtype=torch.uint8).set_(storage)
    return whole.as_strided((len(pages), nbytes), (stride, 1), offsets[0]).view(torch.int64)


def bound_checksum(value: int, key: str) -> int:
    """A page checksum bound to its storage key (a hex page hash, optionally '.<pool>')."""
    tag = int(key[:16], 16) ^ (zlib.crc32(key[64:].encode()) << 32)
    return (value ^ tag) & _MASK
