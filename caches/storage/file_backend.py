"""A storage backend that keeps one file per page under a root directory.

Layout: ``<root>/<first two hex digits>/<key>`` (256 subdirectories keep each
directory small). A file is a 32-byte header (magic, format version, checksum
algorithm, payload length, namespace tag, checksum bound to the key) followed
by the raw page bytes. A truncated, foreign, damaged or misplaced file, or one
written under another namespace, is a miss with a recorded fault, never a hit
(caches/storage/integrity.py says what the checksums detect). Writes go to a
temporary file in the same directory and are published with ``os.replace``
(atomic), so a reader sees either nothing or a whole page. POSIX only (uses
``os.readv``/``os.writev``).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import struct
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path

import torch

from caches.core.pools import tensor_bytes_view
from caches.errors import CacheTimeoutError
from caches.storage.base import StorageBackend, StorageConfigError, StorageError, validate_key
from caches.storage.integrity import CHECKSUMS, DEFAULT_CHECKSUM, bound_checksum, checksums
from spec.errors import bounded_repr

__all__ = ["FileStorage", "FILE_MAGIC", "FILE_FORMAT_VERSION", "FILE_HEADER", "namespace_tag"]

FILE_MAGIC = b"HCPG"
FILE_FORMAT_VERSION = 2
# magic, format version, checksum algorithm id, payload length in bytes,
# namespace tag, checksum of the payload bound to the key
FILE_HEADER = struct.Struct("<4sHHQ8sQ")
_ALGORITHMS = {number: name for name, number in CHECKSUMS.items()}


def namespace_tag(namespace: str) -> bytes:
    """The 8 bytes a page header carries for its namespace."""
    return hashlib.blake2b(namespace.encode(), digest_size=8).digest()

_O_BINARY = getattr(os, "O_BINARY", 0)
# Pages read in a row are verified together once about this many bytes arrived:
# small enough to still sit in the CPU's caches, large enough to amortize a call.
VERIFY_GROUP_BYTES = 1 << 20
# A batch smaller than this is read by the calling thread alone (a helper's hand-off costs tens of microseconds).
PARALLEL_READ_MIN_BYTES = 4 << 20


def _read_fully(fd: int, buffers: list[memoryview], enough: int) -> int:
    """Fill ``buffers`` in order from ``fd``; bytes read.

    Stops at EOF or once ``enough`` bytes arrived: the buffers past ``enough``
    only catch extra bytes, which a regular file delivers in the same call.
    """
    views = [view for view in buffers if len(view)]
    total = 0
    while views and total < enough:
        count = os.readv(fd, views)
        if count == 0:
            break
        total += count
        while views and count >= len(views[0]):
            count -= len(views[0])
            views.pop(0)
        if views and count:
            views[0] = views[0][count:]
    return total


def _write_fully(fd: int, buffers: list[memoryview]) -> None:
    views = [view for view in buffers if len(view)]
    while views:
        count = os.writev(fd, views)
        while views and count >= len(views[0]):
            count -= len(views[0])
            views.pop(0)
        if views and count:
            views[0] = views[0][count:]


class FileStorage(StorageBackend):
    """One file per page under ``root``; safe for concurrent readers and writers.

    ``fsync=True`` flushes each page to disk before publishing it; without it a
    crash can leave a short file, which the header check turns into a miss.
    ``namespace`` names what makes stored bytes interchangeable (the caches
    derive it from model, dtype, pool shapes, page size and ranks); a page
    written under another namespace is a miss. ``checksum`` picks the algorithm
    written into new pages; a reader verifies whichever one a page names.
    ``read_threads`` pages of one batch are read at once (the calling thread
    plus read_threads - 1 helpers): reads release the GIL, and one thread
    alone leaves memory bandwidth unused. A batch under PARALLEL_READ_MIN_BYTES
    is read by the caller alone: handing it to a helper costs more than it saves.
    """

    def __init__(
        self,
        root: Path | str,
        *,
        fsync: bool = False,
        read_threads: int = 2,
        read_timeout_s: float = 60.0,
        namespace: str = "",
        checksum: str = DEFAULT_CHECKSUM,
    ) -> None:
        super().__init__()
        if isinstance(read_threads, bool) or not isinstance(read_threads, int) or read_threads < 1:
            raise StorageConfigError(f"read_threads={bounded_repr(read_threads)} is invalid: expected an integer >= 1")
        if not isinstance(namespace, str):
            raise StorageConfigError(f"namespace={bounded_repr(namespace)} is invalid: expected a string")
        if checksum not in CHECKSUMS:
            raise StorageConfigError(f"checksum={bounded_repr(checksum)} is invalid: expected one of {', '.join(map(repr, CHECKSUMS))}")
        self.namespace = namespace
        self._namespace_tag = namespace_tag(namespace)
        self._checksum = checksum
        self._read_threads = read_threads
        self._read_timeout_s = read_timeout_s
        self._readers = (
            ThreadPoolExecutor(read_threads - 1, thread_name_prefix="FileStorage-read") if read_threads > 1 else None
        )
        if not isinstance(root, (str, Path)) or str(root) == "":
            raise StorageConfigError(
                f"storage root {bounded_repr(root)} is invalid: expected a non-empty path (str or Path)"
            )
        if not isinstance(fsync, bool):
            raise StorageConfigError(f"fsync={bounded_repr(fsync)} is invalid: expected True or False")
        self.root = Path(root)
        self._fsync = fsync
        self._root_str = os.fspath(self.root)
        self._prepare_root()

    def _unusable(self, reason: str) -> StorageConfigError:
        return StorageConfigError(f"storage root '{self.root}' is unusable: {reason}")

    def _prepare_root(self) -> None:
        if self.root.exists() and not self.root.is_dir():
            raise self._unusable("it exists and is not a directory")
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise self._unusable(
                f"cannot create it ({type(exc).__name__}: {exc.strerror or exc})"
            ) from None
        # Permission bits alone do not tell (ACLs, read-only mounts, root):
        # creating and removing a real file does.
        probe = os.path.join(self._root_str, f".probe-{os.getpid()}-{secrets.token_hex(6)}")
        try:
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_BINARY, 0o644)
            try:
                os.write(fd, b"probe")
            finally:
                os.close(fd)
            os.unlink(probe)
        except OSError as exc:
            raise self._unusable(
                f"cannot create and remove a file in it "
                f"({type(exc).__name__}: {exc.strerror or exc})"
            ) from None

    def __repr__(self) -> str:
        return f"FileStorage('{self.root}')"

    @property
    def read_timeout_s(self) -> float:
        """How long a batch waits for a helper's page reads before failing with CacheTimeoutError."""
        return self._read_timeout_s

    @property
    def read_threads(self) -> int:
        """Threads reading one large batch at once (the caller and its helpers)."""
        return self._read_threads

    def _path(self, key: str) -> str:
        # Plain concatenation: keys are validated, and this runs once per page.
        return f"{self._root_str}{os.sep}{key[:2]}{os.sep}{key}"

    def path_for(self, key: str) -> Path:
        """Where ``key``'s page is (or would be) stored."""
        return Path(self._path(validate_key(key)))

    def _contains(self, key: str) -> bool:
        return os.path.exists(self._path(key))

    def _get_many(self, keys: list[str], targets: list[torch.Tensor]) -> list[bool]:
        if self._readers is None or len(keys) < 2 or sum(t.numel() * t.element_size() for t in targets) < PARALLEL_READ_MIN_BYTES:
            return self._read_verified(keys, targets)
        # Contiguous chunks, one per reader; the caller reads the first itself.
        per = -(-len(keys) // self._read_threads)
        chunks = [(keys[i : i + per], targets[i : i + per]) for i in range(0, len(keys), per)]
        futures = [self._readers.submit(self._read_verified, k, t) for k, t in chunks[1:]]
        results = self._read_verified(*chunks[0])
        for future in futures:
            try:
                results += future.result(timeout=self._read_timeout_s)
            except FutureTimeout:
                raise CacheTimeoutError(f"{self!r}: a page read did not finish within {self._read_timeout_s}s") from None
        return results

    def _read_verified(self, keys: list[str], targets: list[torch.Tensor]) -> list[bool]:
        """Read pages, verifying their checksums while the bytes are still in the CPU's caches.

        Pages are verified in groups of about VERIFY_GROUP_BYTES, right after
        they were read: one vectorized pass per group, instead of a second
        trip to memory for the whole batch.
        """
        stored: list[tuple[str, int] | None] = []
        group: list[int] = []
        group_bytes = 0
        for index, (key, target) in enumerate(zip(keys, targets)):
            found = self._read_page(key, target)
            stored.append(found)
            if found is None:
                continue
            group.append(index)
            group_bytes += target.numel() * target.element_size()
            if group_bytes >= VERIFY_GROUP_BYTES:
                self._verify(keys, targets, stored, group)
                group, group_bytes = [], 0
        self._verify(keys, targets, stored, group)
        return [s is not None for s in stored]

    def _verify(self, keys: list[str], targets: list[torch.Tensor], stored: list[tuple[str, int] | None], indices: list[int]) -> None:
        """Check the stored checksums of these read pages (one vectorized pass per algorithm); a mismatch is a miss."""
        for algorithm in {stored[i][0] for i in indices}:
            # A page found damaged under an earlier algorithm is None by now: pages of two algorithms in one batch
            # (a damaged algorithm id, a store shared across checksum settings) must not fail the whole read.
            same = [i for i in indices if stored[i] is not None and stored[i][0] == algorithm]
            for i, value in zip(same, checksums(algorithm, [targets[i] for i in same])):
                if bound_checksum(value, keys[i]) != stored[i][1]:
                    self.record_fault(keys[i], f"checksum mismatch ({algorithm}): the page is damaged or stored under another key")
                    stored[i] = None

    def close(self) -> None:
        super().close()
        if self._readers is not None:
            self._readers.shutdown(wait=True)

    def _get_one(self, key: str, target: torch.Tensor) -> bool:
        return self._read_verified([key], [target])[0]

    def _read_page(self, key: str, target: torch.Tensor) -> tuple[str, int] | None:
        """Read one page into ``target``; (checksum algorithm, stored checksum), or None on a miss."""
        try:
            fd = os.open(self._path(key), os.O_RDONLY | _O_BINARY)
        except FileNotFoundError:
            return None
        except OSError as exc:
            self.record_fault(key, f"cannot open page file: {type(exc).__name__}: {exc}")
            return None
        header = memoryview(bytearray(FILE_HEADER.size))
        payload = tensor_bytes_view(target)
        # One byte past the expected end tells a longer file from an exact one.
        overflow = memoryview(bytearray(1))
        try:
            total = _read_fully(fd, [header, payload, overflow], len(header) + len(payload))
        except OSError as exc:
            self.record_fault(key, f"read failed: {type(exc).__name__}: {exc}")
            return None
        finally:
            os.close(fd)
        reason = self._check_read(total, header, len(payload))
        if reason is not None:
            self.record_fault(key, reason)
            return None
        _, _, algorithm, _, _, stored = FILE_HEADER.unpack(header)
        return _ALGORITHMS[algorithm], stored

    def _check_read(self, total: int, header: memoryview, expected: int) -> str | None:
        """Why a read page cannot be used, or None when it is whole and fits (its checksum is checked after)."""
        if total < FILE_HEADER.size:
            return f"truncated header: file holds {total} bytes, header needs {FILE_HEADER.size}"
        magic, version, algorithm, length, tag, _ = FILE_HEADER.unpack(header)
        if magic != FILE_MAGIC:
            return f"foreign file: magic {bytes(magic)!r}, expected {FILE_MAGIC!r}"
        if version != FILE_FORMAT_VERSION:
            return f"unsupported format version {version}, expected {FILE_FORMAT_VERSION}"
        if algorithm not in _ALGORITHMS:
            return f"unknown checksum algorithm id {algorithm}, expected one of {sorted(_ALGORITHMS)}"
        if length != expected:
            return f"size mismatch: stored page is {length} bytes, target holds {expected}"
        if tag != self._namespace_tag:
            return f"page of another namespace: its tag {tag.hex()} is not this store's {self._namespace_tag.hex()} ({self.namespace!r})"
        payload_read = total - FILE_HEADER.size
        if payload_read < length:
            return f"truncated payload: {payload_read} of {length} bytes present"
        if payload_read > length:
            return f"trailing bytes after the {length}-byte payload"
        return None

    def _set_one(self, key: str, source: torch.Tensor) -> bool:
        final = self._path(key)
        directory = os.path.dirname(final)
        temp = os.path.join(directory, f".{key}.{secrets.token_hex(8)}.tmp")
        payload = tensor_bytes_view(source)
        stored = bound_checksum(checksums(self._checksum, [source])[0], key)
        header = memoryview(
            FILE_HEADER.pack(FILE_MAGIC, FILE_FORMAT_VERSION, CHECKSUMS[self._checksum], len(payload), self._namespace_tag, stored)
        )
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_BINARY
        try:
            try:
                fd = os.open(temp, flags, 0o644)
            except FileNotFoundError:
                os.makedirs(directory, exist_ok=True)
                fd = os.open(temp, flags, 0o644)
            try:
                _write_fully(fd, [header, payload])
                if self._fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            # Same content under the same key: a concurrent writer that wins
            # the race publishes an identical, complete file.
            os.replace(temp, final)
        except OSError as exc:
            try:
                os.unlink(temp)
            except OSError:
                pass
            self.record_fault(key, f"write failed: {type(exc).__name__}: {exc}")
            return False
        return True

    def remove(self, keys: list[str]) -> int:
        """Delete the given keys (eviction, tests); returns how many existed."""
        self._check_open()
        removed = 0
        for key in [validate_key(key) for key in keys]:
            try:
                os.unlink(self._path(key))
                removed += 1
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise StorageError(f"{self!r}: cannot remove page {key}: {type(exc).__name__}: {exc.strerror or exc}") from None
        return removed
