"""L3 page storage: the backend interface and two backends (files, memory)."""

from caches.storage.base import (
    FaultLog,
    PoolTransfer,
    StorageBackend,
    StorageClosedError,
    StorageConfigError,
    StorageError,
    StorageFault,
    StorageKeyError,
    StorageTensorError,
    pool_key,
    validate_key,
)
from caches.storage.file_backend import FileStorage
from caches.storage.memory_backend import MemoryStorage

__all__ = [
    "FaultLog",
    "FileStorage",
    "MemoryStorage",
    "PoolTransfer",
    "StorageBackend",
    "StorageClosedError",
    "StorageConfigError",
    "StorageError",
    "StorageFault",
    "StorageKeyError",
    "StorageTensorError",
    "pool_key",
    "validate_key",
]
