"""The errors the caches raise on purpose: one hierarchy, exported from `caches`.

    CacheError (defined in spec/errors.py, which every package may import)
    |-- ConfigError (spec's, a ValueError): a bad configuration field
    |   `-- CacheArgumentError: a bad argument, one line naming the argument,
    |       |                   the value (bounded: spec.errors.bounded_repr) and what is accepted
    |       `-- BadTokensError: tokens that are not a list of token ids
    |-- CacheClosedError (RuntimeError): a call after close()
    |-- CacheFullError (RuntimeError): a tier cannot hold the data even after eviction
    |-- CacheTimeoutError (TimeoutError): a bounded wait ran out, naming what hung
    |-- BackgroundError (RuntimeError): an unexpected exception (a bug, not a storage
    |                    fault) on a background thread, raised by the next scheduler call
    `-- StorageError: the storage tier
        |-- StorageKeyError (ValueError): a key that is not a page hash with an optional pool suffix
        |-- StorageConfigError (ValueError): a backend that cannot be set up
        |-- StorageTensorError (ValueError): a tensor that cannot be transferred
        `-- StorageClosedError (RuntimeError): a backend used after close()

The core's own parts (pools, allocators, the tree, the copy engine, the
fence, the components) raise errors of their own kinds, each a CacheError.

Storage faults (a page missing, damaged, foreign, or a backend raising) are
not errors: they are recorded (`storage.faults`, `controller.fault_list()`)
and the transfer counts as failed.
"""

from __future__ import annotations

from spec.errors import CacheError, ConfigError

__all__ = [
    "BackgroundError",
    "BadTokensError",
    "CacheArgumentError",
    "CacheClosedError",
    "CacheError",
    "CacheFullError",
    "CacheTimeoutError",
    "StorageClosedError",
    "StorageConfigError",
    "StorageError",
    "StorageKeyError",
    "StorageTensorError",
]


class CacheArgumentError(ConfigError):
    """An argument of a public method holds a value the cache does not accept."""


class BadTokensError(CacheArgumentError):
    """Tokens are not a list (or 1-D integer tensor) of token ids in [0, 2**32)."""


class CacheClosedError(CacheError, RuntimeError):
    """The cache was used after close()."""


class CacheFullError(CacheError, RuntimeError):
    """A tier has no room for the data even after eviction."""


class CacheTimeoutError(CacheError, TimeoutError):
    """A bounded wait ran out; the message names what hung."""


class BackgroundError(CacheError, RuntimeError):
    """A background thread hit an unexpected exception: a bug, not a storage fault."""


class StorageError(CacheError):
    """Base class of storage errors."""


class StorageKeyError(StorageError, ValueError):
    """A storage key is not a page hash, optionally with a pool suffix."""


class StorageConfigError(StorageError, ValueError):
    """A backend cannot be set up with the given configuration."""


class StorageTensorError(StorageError, ValueError):
    """A target or source tensor cannot be used for a storage transfer."""


class StorageClosedError(StorageError, RuntimeError):
    """The backend was used after ``close()``."""
