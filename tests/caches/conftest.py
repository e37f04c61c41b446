"""Shared by the cache tests: oracles that trust no cache (tests/caches/oracles.py).

The `oracle` fixture gives the bytes a request must carry (a function of each
page's chained hash, so requests sharing a prefix agree on it) and the slots
every holder of a cache holds, counted without its allocators. Caches come
from the one factory, `cache_factory` (tests/conftest.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# Test modules here import the oracles module directly (tests are not a package).
sys.path.insert(0, str(Path(__file__).parent))
from oracles import Oracle  # noqa: E402


@pytest.fixture
def oracle() -> type[Oracle]:
    return Oracle

