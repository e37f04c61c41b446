"""Reference hierarchical KV caches (hiradix, unified_radix, hi_mamba_radix) on one shared core.

Build one with `caches.registry.build(name, config)`. The errors they raise on
purpose form one hierarchy (caches/errors.py), exported here.
"""

from caches.errors import *  # noqa: F403 - the error hierarchy
from caches.errors import __all__  # noqa: F401
