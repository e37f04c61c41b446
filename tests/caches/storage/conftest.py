import hashlib

import pytest
import torch

from caches.storage import FileStorage, MemoryStorage
from conformance.scenarios.workload import random_rows


def page_hash(label: str) -> str:
    return hashlib.sha256(label.encode()).hexdigest()


def random_page(shape: tuple[int, ...], dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Random bytes viewed as ``dtype`` (NaN payloads included: bytes must survive)."""
    return random_rows(1, shape, dtype, seed)[0]


def raw_bytes(tensor: torch.Tensor) -> bytes:
    # Independent of the code under test (no byte views): element by element.
    return bytes(tensor.contiguous().reshape(-1).view(torch.uint8).tolist())


@pytest.fixture(params=["file", "memory"])
def backend(request, tmp_path):
    store = FileStorage(tmp_path / "store") if request.param == "file" else MemoryStorage()
    yield store
    store.close()


@pytest.fixture
def helpers():
    class Helpers:
        hash = staticmethod(page_hash)
        page = staticmethod(random_page)
        bytes_of = staticmethod(raw_bytes)

    return Helpers
